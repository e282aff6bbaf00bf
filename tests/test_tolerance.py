"""The run-time checks' tolerance follows the dtype and the depth.

On a GPU, a correct bf16 fast path of a 32-layer, 4096-wide model differed from its plain path by 0.261 on
logits of scale 7 (the kernels for the two shapes round differently), and the old constant (3e-2 · scale)
refused it. A CPU's bf16 kernels give both paths bit-identical results, so the test makes the CPU round like a
GPU: every attention and MLP output gets an independent relative error drawn uniformly from [−u, u] (u the
dtype's unit roundoff) on each forward, which is the rounding model the rule is derived from
(:mod:`mathcircuits.models.forward.integrity`). With activations of a 7B model's scale (logits up to about 5), the old
constant refuses it, the rule does not, and the defect the check exists for (a prefix cache silently dropped,
as under transformers 5.24) is still refused with a wide margin.
"""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mathcircuits.models import PrefixRunner, from_hf
from mathcircuits.models.forward.integrity import (
    RTOL,
    compare,
    model_depth,
    probe_tokens,
    relative_tolerance,
    unit_roundoff,
)
from mathcircuits.models.forward.prefix import shared_prefix_len
from mathcircuits.models.tiny import tiny_tokenizer

GPU_BF16_7B = {"difference": 0.261, "scale": 7.0, "depth": 32}  # measured on an H200


def test_the_rule_passes_the_gpu_measurement_and_refuses_what_changes_logits():
    tol = relative_tolerance(torch.bfloat16, GPU_BF16_7B["depth"]) * GPU_BF16_7B["scale"]
    assert GPU_BF16_7B["difference"] <= tol / 2  # passes with a margin of 2 at least
    assert GPU_BF16_7B["difference"] > RTOL[torch.bfloat16] * GPU_BF16_7B["scale"]  # the old constant refused it
    assert tol < 0.2 * GPU_BF16_7B["scale"]  # a defect that moves logits by 20% of their scale is refused
    # float32 keeps its floor; the rounding term grows with depth and with the dtype's roundoff
    assert relative_tolerance(torch.float32, 32) == RTOL[torch.float32]
    assert relative_tolerance(torch.bfloat16, 64) > relative_tolerance(torch.bfloat16, 16)
    assert relative_tolerance(torch.bfloat16, 32) > relative_tolerance(torch.float16, 32)
    assert unit_roundoff(torch.bfloat16) == 2.0**-8 and unit_roundoff(torch.float16) == 2.0**-11


def _deep(dtype: torch.dtype, n_layers: int = 32, d_model: int = 256, init: float = 0.08):
    """A random Llama of ``n_layers`` blocks whose initialisation gives logits of a 7B model's scale."""
    tok = tiny_tokenizer()
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=d_model,
        intermediate_size=(d_model * 8) // 3,
        num_hidden_layers=n_layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
        initializer_range=init,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    hf = LlamaForCausalLM(cfg).to(dtype).eval()
    hf.config.architectures = ["LlamaForCausalLM"]
    return hf, tok


def _round_like_a_gpu(hf: LlamaForCausalLM, dtype: torch.dtype) -> None:
    u, gen = unit_roundoff(dtype), torch.Generator().manual_seed(1)

    def rounding(module, args, out):
        t = out[0] if isinstance(out, tuple) else out
        noise = (torch.rand(t.shape, generator=gen) * 2 - 1) * u
        t = (t.float() * (1 + noise)).to(t.dtype)
        return (t, *out[1:]) if isinstance(out, tuple) else t

    for layer in hf.model.layers:
        layer.self_attn.register_forward_hook(rounding)
        layer.mlp.register_forward_hook(rounding)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_a_correct_fast_path_of_a_deep_model_passes_and_a_dropped_cache_is_refused(dtype):
    hf, tok = _deep(dtype)
    _round_like_a_gpu(hf, dtype)
    bridge = from_hf(hf, tok).bridge
    depth = model_depth(bridge)
    assert depth == 32
    with torch.no_grad():
        toks = probe_tokens(len(tok), "cpu")
        plain = bridge(toks)[:, -3:]
        scale = float(plain.abs().max())
        diffs = []
        for _ in range(2):  # two draws of the rounding; the check's own comparison (models/forward/prefix.py)
            fast = PrefixRunner(bridge).logits_from(toks, toks.shape[1] - 3)
            diffs.append(compare(fast, bridge(toks)[:, -3:], depth=depth))
        dropped = bridge(toks[:, shared_prefix_len(toks) :])[:, -3:]  # the defect: the suffix never sees the prefix
        defect, defect_tol = compare(dropped, plain, depth=depth)
    assert scale > 3  # logits of a 7B model's scale: the regime of the false alarm
    for diff, tol in diffs:
        assert 0 < diff <= tol  # the correct path passes (and the rounding is really there)
        if dtype == torch.bfloat16:
            assert diff > RTOL[dtype] * scale or max(d for d, _ in diffs) > RTOL[dtype] * scale  # old rule refused
    assert defect > 3 * defect_tol, (defect, defect_tol)  # the dropped cache is refused with a wide margin
    expected = math.sqrt(2 * depth) * unit_roundoff(dtype) * scale
    assert 0.25 * expected < max(d for d, _ in diffs) < 4 * expected  # the rounding model predicts its size
