import ast
import os
import random

import numpy as np
import pytest
import torch

torch.set_num_threads(1)


def _cache_only_our_modules_under_the_jaxtyping_tag() -> None:
    """Let the libraries our modules import load from their own bytecode caches.

    jaxtyping's import hook (0.3.x) swaps ``cache_from_source`` while it runs one of our modules, so every
    library first imported from inside it (torch's submodules, sympy, scipy, transformers: ~2,800 files) looks
    for a cache under jaxtyping's tag, misses, and is compiled from source, ~25 s a pytest process where
    bytecode is not written (PYTHONDONTWRITEBYTECODE). Only our modules need the tag.
    """
    import importlib.util

    from jaxtyping import _import_hook as hook

    tagged, plain = getattr(hook, "_optimized_cache_from_source", None), importlib.util.cache_from_source
    if tagged is None:  # a jaxtyping without the private hook: it works, only slower
        return

    ours = tuple(os.path.join(d, "") for d in importlib.util.find_spec("mathcircuits").submodule_search_locations)

    def ours_only(checker_hash, /, path, debug_override=None):
        if os.fspath(path).startswith(ours):  # a tag of our own: the transform below differs from jaxtyping's
            return tagged(checker_hash + "borders", path, debug_override)
        return plain(path, debug_override)

    hook._optimized_cache_from_source = ours_only


def _check_functions_and_methods_not_closures() -> None:
    """Type-check every module-level function and method, but not the closures defined inside them.

    jaxtyping's hook decorates nested ``def``s too, so each call of the enclosing function builds a checked
    wrapper anew (beartype writes and compiles one: 1-4 ms), and the forward hooks made per call are then
    checked at every layer. Closures here are hooks and key functions typed ``Any``; the borders are the
    functions and methods a module defines, and those stay checked.
    """
    from jaxtyping import _import_hook as hook

    transformer = getattr(hook, "JaxtypingTransformer", None)
    if transformer is None or not hasattr(transformer, "visit_FunctionDef"):
        return
    checked = transformer.visit_FunctionDef

    def visit_function(self, node):
        if any(isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)) for p in getattr(self, "_parents", ())):
            self._parents.append(node)
            self.generic_visit(node)
            self._parents.pop()
            return node
        return checked(self, node)

    transformer.visit_FunctionDef = visit_function


_cache_only_our_modules_under_the_jaxtyping_tag()
_check_functions_and_methods_not_closures()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MATHCIRCUITS_PROGRESS", "0")  # no bars in test output (mathcircuits._progress)
# every process runs its own fast-path checks: tests break fast paths on purpose (mathcircuits.models.forward.verdicts)
os.environ.setdefault("MATHCIRCUITS_CHECKS_CACHE", "off")


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
