"""The family matrix: every tiny model family loads, and the toolkit's methods are exact or refused on it."""

import pytest
import torch

from mathcircuits.models import TINY_FAMILIES, load_hf_model, load_model, tiny_model

FAMILIES = sorted(TINY_FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_family_loads_and_bridge_equals_hf(family):
    hooked = load_model(f"tiny-{family.replace('_', '-')}")
    hf, _ = load_hf_model(f"tiny-{family}")
    tokens = hooked.to_tokens(["3 + 5 = ", "7 - 2 = "])
    with torch.no_grad():
        assert (hooked(tokens) - hf(tokens).logits).abs().max() < 1e-5
    # tiny-gpt2 and tiny-llama keep their historical builders (2 and 3 layers); the others are tiny_model's
    assert (hooked.spec.n_heads, hooked.spec.d_model) == (4, 64)
    assert hooked.spec.n_layers == hf.config.num_hidden_layers == (2 if family == "gpt2" else 3)


def test_tiny_model_overrides_and_unknown_family():
    model, _ = tiny_model("llama", n_layers=2, n_kv_heads=4)
    assert model.config.num_hidden_layers == 2 and model.config.num_key_value_heads == 4
    a, _ = tiny_model("gpt-neox", seed=1)
    assert a.config.use_parallel_residual is True
    with pytest.raises(KeyError, match="no tiny model of family 'bert'"):
        tiny_model("bert")
