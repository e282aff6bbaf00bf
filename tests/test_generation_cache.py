"""Prefix-cached greedy generation equals the plain left-padded generation (texts, and first-step logits ≤ 1e-5)."""

from __future__ import annotations

import pytest
import torch

import mathcircuits.evaluation.generation as generation
from mathcircuits.evaluation.batching import common_prefix_length
from mathcircuits.evaluation.generation import first_step_logits, generate_greedy, prefix_cache_supported
from mathcircuits.models.forward.integrity import compare, model_depth
from mathcircuits.models.tiny import TINY_FAMILIES, tiny_model

from helpers import FAST_FAMILIES, tiered

SHARED = "Question: 12 + 3 = ?\nAnswer: 15.\n\nQuestion: 7 + 1 = ?\nAnswer: 8.\n\nQuestion: "
# suffixes of different lengths, so every batch pads between the prefix and the suffixes
SUFFIXES = ["4 + 4 = ?\nAnswer:", "100 + 23 = ?\nAnswer:", "9\nA:", "a b c d e f g h i j k\nAnswer:", "2+2"]
PROMPTS = [SHARED + s for s in SUFFIXES]


def _count_tokens(model: torch.nn.Module) -> tuple[list[int], torch.utils.hooks.RemovableHandle]:
    """Tokens the model embeds (summed over every forward), to see which path ran."""
    seen = [0]

    def hook(_module, args):
        seen[0] += args[0].numel()

    return seen, model.get_input_embeddings().register_forward_pre_hook(hook)


def test_common_prefix_length_on_token_ids():
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5, 6], [1, 2, 9]]) == 2
    # identical prompts: every row keeps its last token outside the prefix
    assert common_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2
    assert common_prefix_length([[1, 2, 3], [1]]) == 0
    assert common_prefix_length([[7, 8]]) == 1
    with pytest.raises(ValueError, match="no empty row"):
        common_prefix_length([[1], []])


@pytest.mark.parametrize("family", tiered(sorted(TINY_FAMILIES), FAST_FAMILIES))
def test_cached_generation_equals_plain(family):
    model, tok = tiny_model(family)
    assert prefix_cache_supported(model, 200)
    generate_greedy(model, tok, PROMPTS[:2], max_new_tokens=1)  # the cached path's run-time check runs on first use
    seen, handle = _count_tokens(model)
    try:
        cached = generate_greedy(model, tok, PROMPTS, max_new_tokens=10, batch_size=3, stop=())
        cached_tokens = seen[0]
        seen[0] = 0
        plain = generate_greedy(model, tok, PROMPTS, max_new_tokens=10, batch_size=3, stop=(), prefix_cache=False)
        plain_tokens = seen[0]
    finally:
        handle.remove()
    assert cached == plain and any(cached)
    # the cached path ran the shared prefix once instead of once per row
    prefix = common_prefix_length([tok(p)["input_ids"] for p in PROMPTS])
    assert plain_tokens - cached_tokens == (len(PROMPTS) - 1) * prefix
    lc = first_step_logits(model, tok, PROMPTS, batch_size=3)
    lp = first_step_logits(model, tok, PROMPTS, batch_size=3, prefix_cache=False)
    assert lc.shape == (len(PROMPTS), model.config.vocab_size)
    torch.testing.assert_close(lc, lp, atol=1e-5, rtol=0)


def test_cached_generation_with_stops_equals_plain():
    model, tok = tiny_model("llama")
    kw = dict(max_new_tokens=12, batch_size=2, stop=("\n", "Q"), stop_at_answer=True)
    assert generate_greedy(model, tok, PROMPTS, **kw) == generate_greedy(model, tok, PROMPTS, prefix_cache=False, **kw)


@pytest.mark.parametrize("family", ["mistral", "gemma2", "gemma3"])
def test_short_attention_window_falls_back_to_plain(family, monkeypatch):
    """A sliding window counts cache slots, so padding after the prefix would change what a token sees."""
    model, tok = tiny_model(family, sliding_window=16)
    assert not prefix_cache_supported(model, 100) and prefix_cache_supported(model, 16)
    plain = first_step_logits(model, tok, PROMPTS, prefix_cache=False)
    # the fallback: with prefix_cache=True the plain path runs, the same numbers
    assert torch.equal(first_step_logits(model, tok, PROMPTS), plain)
    # and the fallback is needed: forcing the cached layout on this model changes the logits
    monkeypatch.setattr(generation, "prefix_cache_supported", lambda *_: True)
    assert (first_step_logits(model, tok, PROMPTS) - plain).abs().max() > 1e-2


@pytest.mark.slow
def test_cached_generation_equals_plain_on_embedded():
    from mathcircuits.evaluation import BenchmarkItem
    from mathcircuits.evaluation.prompts import math_prompt
    from mathcircuits.models import load_hf_model

    model, tok = load_hf_model("embedded")
    shots = [
        BenchmarkItem(
            "toy", "Tom has 3 apples and gets 4 more. How many?", "7", rationale="3 + 4 = 7. The answer is 7."
        ),
        BenchmarkItem(
            "toy", "A box holds 12 pens. 5 are taken. How many?", "7", rationale="12 - 5 = 7. The answer is 7."
        ),
    ]
    questions = ["Sam had 9 cards and lost 2. How many are left?", "What is 15 + 27?", "Ann has 4 cats.", "6 + 6?"]
    prompts = [math_prompt(q, shots) for q in questions]
    kw = dict(max_new_tokens=16, batch_size=4, stop_at_answer=True)
    cached = generate_greedy(model, tok, prompts, **kw)
    assert cached == generate_greedy(model, tok, prompts, prefix_cache=False, **kw) and all(cached)
    # one row per batch (no padding): equal to float32 summation order (bit-identical on some CPUs; on others the
    # prefix's and the whole prompt's matrix products, of other row counts, round apart by a few ulps)
    plain_one = first_step_logits(model, tok, prompts, batch_size=1, prefix_cache=False)
    cached_one = first_step_logits(model, tok, prompts, batch_size=1)
    assert float((cached_one - plain_one).abs().max()) <= 1e-4, float((cached_one - plain_one).abs().max())
    # padded batches: the plain path itself moves by ~2.5e-5 (logits up to ~23) between batch 1 and 4, from the
    # padded attention's summation order; the cached path stays within that and its probabilities within 1e-5
    lc = first_step_logits(model, tok, prompts, batch_size=4)
    lp = first_step_logits(model, tok, prompts, batch_size=4, prefix_cache=False)
    floor = float((lp - plain_one).abs().max())  # 2.5e-5 on one CPU, 6.7e-6 on another (2026-11-27)
    diff, tol = compare(lc, lp, torch.float32, model_depth(model))  # the run-time check's rule: 1e-4 of the scale
    assert diff <= tol and diff <= max(10 * floor, 1e-4), (diff, tol, floor)
    torch.testing.assert_close(lc.softmax(-1), lp.softmax(-1), atol=1e-5, rtol=0)
