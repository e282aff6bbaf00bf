"""The claim about what the key heads attend to: operands and operator, more than their layer-mates (C3).
C1 (how many heads matter) is in :mod:`.sparsity`, C4 (the later MLPs need the key heads) in :mod:`.margin`.

Each rule reads saved results (never a model), compares an interval with a null or a floor, and can say
"does not hold"; ``docs/claims.md`` writes the rules and their nulls out.
"""

from __future__ import annotations

import torch

from mathcircuits.analysis import AttentionByRole
from mathcircuits.claims.card import Claim, Verdict
from mathcircuits.claims.paper import (
    above_zero,
    claim,
    not_measured,
    pair_interval,
)
from mathcircuits.patching import KeyComponents
from mathcircuits.stats import DEFAULT_CONFIDENCE, DEFAULT_N_BOOT

__all__ = ["claim_c3"]


def claim_c3(
    attention: AttentionByRole | None,
    key: KeyComponents | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    stage: str = "analyze",
    why_missing: str | None = None,
) -> Claim:
    """C3: the key heads attend to operands and operator more than the non-key heads of the same layers.

    Args:
        attention: an :class:`~mathcircuits.analysis.AttentionByRole` of the key heads **and** the other heads of
            their layers (None: not measured).
        key: the key components (which of the measured heads are key heads; None: not measured).
        n_boot: bootstrap resamples (over templates within operations, or over pairs).
        seed: bootstrap seed.
        confidence: level of the interval.
        stage: the stage named when ``attention`` is missing.
        why_missing: the whole reason instead, when the input is missing for another reason than its stage being off.

    Returns:
        The claim; its value is the mean share on operands + operator of the key heads minus that of their
        layer-mates, per pair, averaged.
    """
    if attention is None:
        return not_measured("C3", stage, reason=why_missing)
    if key is None or not key.heads:
        return not_measured("C3", "identify", "no key heads")
    keys = {tuple(h) for h in key.heads}
    layers = {l for l, _ in keys}
    heads = [tuple(h) for h in attention.heads]
    is_key = torch.tensor([h in keys for h in heads])
    mates = torch.tensor([h not in keys and h[0] in layers for h in heads])
    if not bool(is_key.any()) or not bool(mates.any()):
        return claim(
            "C3",
            "the attention was measured on the key heads only",
            Verdict.NOT_MEASURED,
            "not measured: no non-key head of the key heads' layers was measured; re-run analyze",
            unit="share difference",
        )
    g = attention.grouped(torch.arange(len(attention.pair_ids)))  # [pair, head, 4]
    role = g[..., 0] + g[..., 1]  # operands + operator share
    diff = role[:, is_key].mean(1) - role[:, mates].mean(1)
    iv = pair_interval(diff, attention.template_ids, attention.operations, n_boot, seed, confidence)
    k_share, m_share = float(role[:, is_key].mean()), float(role[:, mates].mean())
    text = (
        f"{int(is_key.sum())} key heads put {k_share:.0%} of their attention on operands + operator, "
        f"{int(mates.sum())} other heads of the same layers {m_share:.0%}: difference "
        f"{iv.points()}"
    )
    verdict, reason = above_zero(iv, "the difference's interval", "layer-mates attend as much")
    return claim(
        "C3",
        text,
        verdict,
        reason,
        value=iv.value,
        low=iv.low,
        high=iv.high,
        unit="share difference (points)",
        n=iv.n,
        interval=iv.method,
    )
