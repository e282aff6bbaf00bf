import os
import random

import numpy as np
import pytest
import torch

torch.set_num_threads(1)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _seed_everything():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def tiny_llama():
    from mathcircuits.models import load_model

    return load_model("tiny-llama")


@pytest.fixture(scope="session")
def tiny_gpt2():
    from mathcircuits.models import load_model

    return load_model("tiny-gpt2")


@pytest.fixture(scope="session")
def template_sets():
    from mathcircuits.data import load_templates

    return load_templates()


@pytest.fixture(scope="session")
def embedded():
    from mathcircuits.models import load_model

    return load_model("embedded")


@pytest.fixture(scope="session")
def embedded_add_pairs(embedded, template_sets):
    """Correct few-shot addition pairs of the embedded model (one template, all operand pairs)."""
    from mathcircuits.data import GenerationConfig, filter_correct, generate_pairs, score_pairs

    ds = generate_pairs(
        embedded.tokenizer,
        template_sets,
        GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=81),
    )
    return filter_correct(score_pairs(embedded, ds))
