"""A memory plan for the exact scan: how many pairs per batch and sender rows per MLP call fit a stated budget.

For ``B`` pairs the exact scan keeps one residual change per sender, pair and read position:
``R = B·P·L·(H+1)`` rows of ``d_model`` (``H`` → 0 without heads, ``H+1`` → ``H`` without MLPs), ``P`` = 1,
or the answer's tokens for ``answer_logprob``. In bytes, ``b`` per number, ``T`` the sequence length::

    rows      = 5 · R · d_model · b
    mlp       = chunk_rows · (d_model + 3 · d_mlp) · b                (input, gate, up, product)
    readout   = R · d_model · 4 + [probabilities] R · vocab_chunk · 4 · 2   (vocab_chunk · R ≤ 2**28 by default)
    forwards  = 2 · B · P · L · (H · d_head + 4 · d_model) · b        (the cached values at the read positions)
              + 2B · T · (4 · d_model + 2 · d_mlp) · b + 2B · H · T² · b · 2 + 2B · P · vocab · 4
                (one live forward of both prompt sets: 2B rows)

The budget excludes the weights. Checked against a measured peak in ``docs/howto/big-models-on-gpu.md``.

Usage::

    plan = plan_scan(model.spec, torch.bfloat16, "8GB", needs_probs=False)
    path_patch(model, pairs, max_memory="8GB")      # the same plan, made and used by path_patch
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from mathcircuits._errors import FixableValueError
from mathcircuits.models import vocab_chunk_for
from mathcircuits.models.spec import ModelSpec

__all__ = [
    "ScanPlan",
    "plan_scan",
]

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20}
_UNITS |= {"gib": 2**30, "tib": 2**40}


def parse_bytes(size: int | str) -> int:
    """Bytes from an int or a text such as ``"8GB"``, ``"512 MiB"`` or ``"1.5e9"``; must be positive."""
    if isinstance(size, int):
        n = size
    else:
        m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([kKmMgGtT]?[iI]?[bB]?)\s*", size)
        if m is None or m.group(2).lower() not in _UNITS:
            raise FixableValueError(
                f"max_memory={size!r} is not a size. ", "give bytes, or a text like '8GB' or '512MiB'."
            )
        n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if n <= 0:
        raise FixableValueError(
            f"max_memory={size!r} is not positive. ", "give the bytes the scan may use, e.g. '8GB'."
        )
    return n


@dataclass(frozen=True)
class ScanPlan:
    """Pairs per batch and sender rows per MLP call, with the estimated working memory and the budget (bytes)."""

    batch_size: int
    chunk_rows: int
    estimated_bytes: int
    budget_bytes: int


def scan_bytes(
    spec: ModelSpec,
    dtype: torch.dtype,
    batch_size: int,
    chunk_rows: int,
    needs_probs: bool,
    seq: int = 128,
    heads: bool = True,
    mlps: bool = True,
    vocab_chunk: int | None = None,
    positions: int = 1,
) -> int:
    """The estimated working memory of one batch of the exact scan (module docstring), in bytes.

    ``seq`` is the prompt length; ``positions`` the read positions per pair (``P``).
    """
    b = torch.empty(0, dtype=dtype).element_size()
    L, H, d, B, P = spec.n_layers, spec.n_heads, spec.d_model, batch_size, positions
    R = B * P * L * ((H if heads else 0) + (1 if mlps else 0))
    seq = seq + P - 1
    rows = 5 * R * d * b
    mlp = min(chunk_rows, max(R, 1)) * (d + 3 * spec.d_mlp) * b
    readout = R * d * 4 + (R * min(vocab_chunk_for(R, vocab_chunk), spec.vocab_size) * 4 * 2 if needs_probs else 0)
    cached = 2 * B * P * L * (H * spec.d_head + 4 * d) * b
    live = 2 * B  # the reference and counterfactual prompts run as one batch
    forward = live * seq * (4 * d + 2 * spec.d_mlp) * b + 2 * live * H * seq * seq * b + live * P * spec.vocab_size * 4
    return int(rows + mlp + readout + cached + forward)


def plan_scan(
    spec: ModelSpec,
    dtype: torch.dtype,
    max_memory: int | str,
    needs_probs: bool,
    batch_size: int = 16,
    seq: int = 128,
    heads: bool = True,
    mlps: bool = True,
    positions: int = 1,
) -> ScanPlan:
    """The largest pair batch (at most ``batch_size``) and MLP chunk (at most 8192 rows) that fit ``max_memory``.

    A smaller MLP chunk costs little time, fewer pairs per batch cost more forwards: so the batch is
    lowered only when even a chunk of 1024 rows (or all the rows) does not fit. ``max_memory`` is what
    the scan may use beyond the weights; ``needs_probs``: the metric needs the vocabulary's normaliser;
    ``seq`` is the prompt length in tokens; ``positions`` as in :func:`scan_bytes`. Refused (ValueError)
    when not even one pair with a 64-row chunk fits.
    """
    budget = parse_bytes(max_memory)

    def est(b: int, c: int) -> int:
        return scan_bytes(spec, dtype, b, c, needs_probs, seq, heads, mlps, positions=positions)

    for b in range(batch_size, 0, -1):
        rows = b * positions * spec.n_layers * ((spec.n_heads if heads else 0) + (1 if mlps else 0))
        for c in (8192, 4096, 2048, 1024, 512, 256, 128, 64):
            if (c >= min(1024, rows) or b == 1) and est(b, c) <= budget:
                return ScanPlan(b, c, est(b, c), budget)
    need = est(1, 64)
    raise FixableValueError(
        f"max_memory={max_memory!r} ({budget / 1e9:.3g} GB) is below the {need / 1e9:.3g} GB the exact scan of one "
        f"pair of {seq} tokens ({positions} read positions) needs on {spec.name}. ",
        "raise max_memory, use shorter prompts, or split the model over more devices (device_map).",
    )
