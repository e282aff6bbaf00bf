"""The numbers two models are compared on, each with its interval, and the one rule that calls a difference.

Two point estimates always differ; a difference is called only where the two intervals (same confidence
level) do not overlap: ``a_lo > b_hi``: "A higher"; ``b_lo > a_hi``: "B higher"; otherwise "overlap", and
"no interval" when either side has none. Non-overlap of two 95% intervals is a conservative test (about
99.5% for equal widths), so a marked difference is a strong one; "overlap" is not evidence of equality.

Depths are *relative depth*, ``layer / (n_layers − 1)``, so 18 layers (Gemma 3 270M) and 30 (SmolLM2-135M)
share one scale. A layer is a bin of that scale, not a point: layer ``l`` stands for
``[(l − ½), (l + ½)] / (n_layers − 1)``, so every depth interval is widened by half a layer on each side
(:func:`depth_interval`). Otherwise "L12 [L12, L12]" of 18 vs "L21 [L21, L21]" of 30 (0.706 vs 0.724)
would count as separated although neither model can place its layer more finely. "No such layer" (no MLP
raises the answer in a resample) is depth ``+inf``, which sorts after every real layer.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from mathcircuits.ablation import KnockoutResult
from mathcircuits.analysis import AttentionByRole, MLPProbeResult
from mathcircuits.patching import KeyComponents
from mathcircuits.patching.selection import median_depth
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.bootstrap import bootstrap_mean
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, DEFAULT_UNCERTAINTY, wilson_interval

__all__ = [
    "Separation",
]

Separation = Literal["A higher", "B higher", "overlap", "no interval"]
SEPARATIONS: tuple[Separation, ...] = ("A higher", "B higher", "overlap", "no interval")

_NAN = float("nan")


def no_interval(n: int = 0) -> Interval:
    """An interval that says "not measured" (NaN value and bounds)."""
    return Interval(_NAN, _NAN, _NAN, n, DEFAULT_CONFIDENCE, "none")


def separation(a: Interval, b: Interval) -> Separation:
    """Whether two intervals separate (see the module docstring).

    ``"A higher"``, ``"B higher"``, ``"overlap"`` or ``"no interval"`` (a NaN bound on either side).
    """
    if any(math.isnan(x) for x in (a.low, a.high, b.low, b.high)):
        return "no interval"
    if a.low > b.high:
        return "A higher"
    if b.low > a.high:
        return "B higher"
    return "overlap"


def _quantile_interval(value: float, xs: list[float], n: int, confidence: float, method: str) -> Interval:
    t = torch.tensor([x for x in xs if not math.isnan(x)], dtype=torch.float64)
    if t.numel() == 0:
        return Interval(value, _NAN, _NAN, n, confidence, method)
    a = 1 - confidence
    q = torch.quantile(t, torch.tensor([a / 2, 1 - a / 2], dtype=torch.float64))
    return Interval(value, float(q[0]), float(q[1]), n, confidence, method)


def depth_interval(layers: Interval, n_layers: int) -> Interval:
    """A layer interval as relative depth, widened by half a layer each side (see the module docstring).

    ``layers`` may be fractional (e.g. a median); a bound of ``n_layers`` or more means "no such layer" and
    gives ``+inf``; NaN stays NaN.
    """
    scale = max(1, n_layers - 1)

    def rel(layer: float, shift: float) -> float:
        if math.isnan(layer) or layer >= n_layers:
            return layer if math.isnan(layer) else math.inf
        return (layer + shift) / scale

    return Interval(rel(layers.value, 0.0), rel(layers.low, -0.5), rel(layers.high, 0.5), layers.n,
                    layers.confidence, layers.method, layers.seed)  # fmt: skip


def key_share(key: KeyComponents, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Share of all heads that are key heads, with the selection-stability resamples' interval (claim C1).

    The interval is NaN when ``key`` has no stability.
    """
    total = key.model.n_layers * key.model.n_heads
    sizes = [s / total for s in key.stability_sizes]
    return _quantile_interval(len(key.heads) / total, sizes, key.stability_n_boot, confidence, "bootstrap")


def key_depth(key: KeyComponents, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Median relative depth of the key heads, with the stability resamples' interval (claim C1).

    Percentile interval over the resamples, widened by half a layer each side (:func:`depth_interval`); NaN
    when ``key`` has no stability.
    """
    n = key.model.n_layers
    scale = max(1, n - 1)
    depth = median_depth([layer for layer, _ in key.heads], n)
    iv = _quantile_interval(depth, list(key.stability_depths), key.stability_n_boot, confidence, "bootstrap")
    in_layers = Interval(iv.value * scale, iv.low * scale, iv.high * scale, iv.n, iv.confidence, iv.method)
    return depth_interval(in_layers, n)


def knockout_point(
    ko: KnockoutResult, n_key: int | None, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[int, Interval, Interval]:
    """Accuracy with the top-k heads ablated and with k random heads, at k = the number of key heads.

    The point claim C2 reads: k = ``n_key``, else the smallest measured k above it, else the largest k (also
    for ``n_key`` None). Returns ``(k, ranked, random)``: the ranked heads' accuracy (Wilson over the pairs)
    and the random heads' (Wilson over pairs × seeds, widened to the range of the seeds).
    """
    above = [i for i, k in enumerate(ko.ks) if n_key is not None and k >= max(n_key, 1)]
    j = above[0] if above else len(ko.ks) - 1
    m = ko.n_pairs
    ranked = wilson_interval(round(ko.ranked_accuracy[j] * m), m, confidence)
    rnd = ko.random_accuracy[:, j]
    rw = wilson_interval(round(float(rnd.sum()) * m), rnd.shape[0] * m, confidence)
    seeds = [float(x) for x in rnd]
    random = Interval(rw.value, min([rw.low, *seeds]), max([rw.high, *seeds]), rw.n, confidence, "wilson")
    return int(ko.ks[j]), ranked, random


def attention_excess(
    att: AttentionByRole,
    target: Literal["operands", "operator"],
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> Interval:
    """The key heads' mean attention share on the operands (or operator) above uniform attention.

    Per pair, the excess share (share − the uniform baseline ``n_role / n_visible``, so −1…1) is averaged over
    the key heads; the interval is the percentile bootstrap over pairs (claim C3 compares the attention off the
    sink with the key heads' layer-mates instead).
    """
    idx = torch.arange(len(att.pair_ids))
    per_pair = att.grouped(idx)[..., 2 if target == "operands" else 3].mean(1)  # [pair]
    lo, hi = bootstrap_mean(per_pair, uncertainty)
    u = uncertainty
    return Interval(float(per_pair.mean()), float(lo), float(hi), len(idx), u.confidence, "bootstrap", u.seed)


def mlp_depth(
    probes: MLPProbeResult,
    which: Literal["raising", "lens_top1"],
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> Interval:
    """Relative depth of the first layer whose MLP raises the answer (or from which the logit lens ranks it first).

    ``which``: ``"raising"`` (mean direct margin above 0.25 logits) or ``"lens_top1"`` (top-1 for half the
    pairs). The bootstrap interval is widened by half a layer each side (claim C4 reads the same layers);
    ``+inf`` for "no such layer".
    """
    return depth_interval(probes.layer_interval(which, uncertainty=uncertainty), probes.n_layers)
