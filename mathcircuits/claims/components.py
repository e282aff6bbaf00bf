"""The claims about the key components themselves: a few mid-depth heads carry the effect (C1), and the later MLPs
write the answer because of them (C4); what they attend to (C3) is :mod:`.attention`'s.

Each rule reads saved results (never a model), compares an interval with a null or a floor, and can say
"does not hold"; ``docs/claims.md`` writes the rules and their nulls out.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from mathcircuits.ablation import MLPMargin
from mathcircuits.claims.card import Claim, Verdict, fmt_interval
from mathcircuits.claims.paper import (
    C1_BAND,
    C1_MAX_FRACTION,
    C1_N_NULL,
    C_ALPHA,
    C_NO_BETTER,
    above_zero,
    claim,
    not_measured,
    pair_interval,
)
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.stats import DEFAULT_CONFIDENCE, DEFAULT_N_BOOT, bootstrap_statistic

__all__ = ["claim_c1", "claim_c4", "concentration", "depth_distance"]


def concentration(per_pair: Tensor, m: int) -> float:
    """Share of the total |mean effect| held by the ``m`` heads of largest |mean effect|.

    Args:
        per_pair: per-pair head effects ``[pair, head]`` (heads flattened).
        m: how many top heads.

    Returns:
        ``sum(top-m |mean|) / sum(|mean|)`` in [0, 1] (NaN when every mean is 0).
    """
    a = per_pair.mean(0).abs()
    total = float(a.sum())
    return float(a.topk(m).values.sum()) / total if total > 0 else float("nan")


def depth_distance(layers: Tensor, n_layers: int) -> Tensor:
    """Distance of each layer's relative depth from the middle, ``|2·l/(n_layers − 1) − 1|`` (0 middle, 1 ends)."""
    return (2 * layers.double() / max(1, n_layers - 1) - 1).abs()


def claim_c1(
    patching: PatchingResult | None,
    key: KeyComponents | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    stage: str = "identify",
    why_missing: str | None = None,
    n_null: int = C1_N_NULL,
) -> Claim:
    """C1: the top 5% of heads hold more of the effect than noise would, and sit nearer the middle than random heads.

    Args:
        patching: the pooled :class:`~mathcircuits.patching.PatchingResult` with per-pair head effects
            (None: not measured).
        key: the key components (only named in the text: the statistic does not depend on the selection rule).
        n_boot: bootstrap resamples of the pairs (the concentration's interval).
        seed: seed of the bootstrap and of both nulls.
        confidence: level of the interval; ``1 − confidence`` is also the null quantile compared with.
        stage: the stage named when ``patching`` is missing.
        why_missing: the whole reason instead, when the input is missing for another reason than its stage being off.
        n_null: draws of each null (sign flips; random head sets).

    Returns:
        The claim; its value is the concentration (share of total |effect| in the top 5% of heads).
    """
    if patching is None:
        return not_measured("C1", stage, reason=why_missing)
    spec = patching.model
    n_heads = spec.n_layers * spec.n_heads
    m = max(1, math.ceil(C1_MAX_FRACTION * n_heads))
    if patching.per_pair_heads is None:
        return claim(
            "C1",
            "no per-pair head effects saved with the patching result",
            Verdict.INCONCLUSIVE,
            "the concentration needs per-pair effects for its null; re-run identify (keep_per_pair=True)",
            unit="share of |effect|",
        )
    e = patching.per_pair_heads.reshape(patching.per_pair_heads.shape[0], -1).double()
    e = e[torch.isfinite(e).all(1)]
    if e.shape[0] < 2:
        return claim(
            "C1", f"{e.shape[0]} finite pairs", Verdict.INCONCLUSIVE, "too few pairs", unit="share of |effect|"
        )
    s_obs = concentration(e, m)
    iv = bootstrap_statistic(e, lambda t: concentration(t, m), n_boot, seed, confidence)
    gen = torch.Generator().manual_seed(int(seed))
    signs = torch.randint(0, 2, (n_null, e.shape[0]), generator=gen).double() * 2 - 1
    flipped = (signs @ e / e.shape[0]).abs()  # [draw, head]: mean effects with no direction shared by the pairs
    s_null = flipped.topk(m, dim=1).values.sum(1) / flipped.sum(1).clamp(min=1e-30)
    q = float(torch.quantile(s_null, confidence))
    p_conc = float((1 + (s_null >= s_obs).sum()) / (1 + n_null))
    top = e.mean(0).abs().topk(m).indices
    layers = top // spec.n_heads
    d_obs = float(depth_distance(layers, spec.n_layers).mean())
    all_d = depth_distance(torch.arange(n_heads) // spec.n_heads, spec.n_layers)
    picks = torch.rand(n_null, n_heads, generator=gen).argsort(1)[:, :m]
    d_null = all_d[picks].mean(1)
    p_depth = float((1 + (d_null <= d_obs + 1e-12).sum()) / (1 + n_null))
    rel = float((layers.double() / max(1, spec.n_layers - 1)).median())
    heads = "head" if m == 1 else "heads"
    chosen = (
        f". Separately, the selection rule '{key.rule}' chose {len(key.heads)} key "
        f"{'head' if len(key.heads) == 1 else 'heads'}, the set C2–C6 test"
        if key is not None
        else ""
    )
    text = (
        f"the {m} strongest {heads} (the top 5% of all {n_heads}, a fixed count for this test) "
        f"{'holds' if m == 1 else 'hold'} "
        f"{fmt_interval(s_obs, iv.low, iv.high, pct=True, digits=0)} of the total |effect| (sign-flip null's "
        f"{confidence:.0%} quantile: {q:.0%}; p = {p_conc:.3f}); their median depth {rel:.2f} (middle band "
        f"{C1_BAND[0]}–{C1_BAND[1]}), nearer the middle than random sets of {m} {heads}: p = {p_depth:.3f}"
        f"{chosen}"
    )
    if iv.low > q and p_depth <= C_ALPHA:
        verdict, reason = (
            Verdict.HOLDS,
            (f"concentration interval above the null's {confidence:.0%} quantile ({q:.0%}), and depth p ≤ {C_ALPHA}"),
        )
    elif iv.high <= q or p_depth >= C_NO_BETTER:
        verdict, reason = (
            Verdict.FAILS,
            (
                f"the top heads hold no more of the effect than sign-flipped noise (interval's upper end "
                f"{iv.high:.0%} ≤ the null's {confidence:.0%} quantile {q:.0%})"
                if iv.high <= q
                else f"the top heads sit no nearer the middle than random heads (depth p = {p_depth:.2f} ≥ "
                f"{C_NO_BETTER})"
            ),
        )
    else:
        verdict, reason = (
            Verdict.INCONCLUSIVE,
            f"the concentration interval straddles the null's {confidence:.0%} quantile ({q:.0%}), or depth "
            f"p = {p_depth:.3f} lies between {C_ALPHA} and {C_NO_BETTER}",
        )
    return claim(
        "C1", text, verdict, reason, value=s_obs, low=iv.low, high=iv.high, unit="share of |effect|", n=int(e.shape[0])
    )


def claim_c4(
    margin: MLPMargin | None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    stage: str = "validate",
    why_missing: str | None = None,
) -> Claim:
    """C4 (causal): knocking out the key heads lowers the later MLPs' direct answer margin.

    Args:
        margin: the :class:`~mathcircuits.ablation.MLPMargin` of the later MLPs, clean and with the key heads
            knocked out (None: not measured).
        n_boot: bootstrap resamples (over templates within operations, or over pairs).
        seed: bootstrap seed.
        confidence: level of the interval.
        stage: the stage named when ``margin`` is missing.
        why_missing: the whole reason instead, when the input is missing for another reason than its stage being off.

    Returns:
        The claim; its value is the mean drop of the summed margin (logits).
    """
    if margin is None:
        return not_measured("C4", stage, reason=why_missing)
    iv = pair_interval(margin.drops, margin.template_ids, margin.operations, n_boot, seed, confidence)
    span = f"L{min(margin.layers)}–L{max(margin.layers)}"
    text = (
        f"MLPs {span} raise the answer by {float(margin.clean_margin.mean()):.2f} logits over the other numbers; "
        f"with the {len(margin.key_heads)} key heads knocked out by {float(margin.ablated_margin.mean()):.2f}: "
        f"drop {fmt_interval(iv.value, iv.low, iv.high, digits=2)}"
    )
    verdict, reason = above_zero(iv, "the margin drop's interval", "the MLPs do not need the key heads")
    return claim("C4", text, verdict, reason, value=iv.value, low=iv.low, high=iv.high, unit="logits", n=iv.n)
