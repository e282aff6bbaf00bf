"""C1: a few heads carry the effect, and they sit mid-depth. How many heads matter is counted by tests over heads.

The paper's number is "< 5% of heads". A head *matters* when its mean effect is at least a margin
``δ = C1_MARGIN · max_h |θ_h|``, a tenth of the strongest head's (as a heatmap is read: the heads that light up
beside the brightest). The margin scales with the effect, not with the number of heads, so a dense map (many heads
of comparable size) fails however many heads the model has, and a weak secondary head of a sparse map does not
count. Every head is tested with templates as the units (:func:`~mathcircuits.stats.small_clusters.cluster_t_test`:
its mean of
template means, a t-test with ``G − 1`` degrees of freedom; pairs as units when the pairs carry no template):

* ``L`` heads shown to matter: ``|θ_h| > δ``, Benjamini–Hochberg at ``α/2`` over the ``H`` heads;
* ``U = H −`` the heads shown *not* to matter (``|θ_h| < δ`` by two one-sided tests, Benjamini–Hochberg at
  ``α/2``).

Then ``[L/H, U/H]`` brackets the share of heads that matter, each side with a false discovery rate of ``α/2``
(in expectation at most that share of the ``L`` heads does not matter, and of the ``H − U`` heads does), around
the share whose estimate reaches ``δ``.
With ``m = ⌈5% · H⌉`` heads allowed: **holds** when ``U ≤ m`` and the top heads are nearer the middle than random
heads (``p ≤ α``); **does not hold** when ``L > m`` or the depth ``p ≥ 0.5``; else inconclusive. Beside it the
card shows the heads with a non-zero effect under a 5% false discovery rate (Benjamini–Hochberg) and under Holm,
and the concentration (the top ``m`` heads' share of the total |effect|, bias-corrected bootstrap over templates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from mathcircuits.claims.card import Claim, Verdict, fmt_interval, no_estimate
from mathcircuits.claims.paper import C1_BAND, C1_MAX_FRACTION, C1_N_NULL, C_ALPHA, C_NO_BETTER, claim, not_measured
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY
from mathcircuits.stats.small_clusters import cluster_t_test
from mathcircuits.stats.testing import benjamini_hochberg, bias_corrected_bootstrap, holm

__all__: list[str] = []

C1_MARGIN = 0.1  # a head matters from a tenth of the strongest head's |effect|


def concentration(per_pair: Tensor, m: int) -> float:
    """Share of the total |mean effect| held by the ``m`` heads of largest |mean effect| (NaN when every mean is 0).

    ``per_pair`` is [pair, head], heads flattened.
    """
    a = per_pair.mean(0).abs()
    total = float(a.sum())
    return float(a.topk(m).values.sum()) / total if total > 0 else float("nan")


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}" + ("" if k == 1 else "s")


def depth_distance(layers: Tensor, n_layers: int) -> Tensor:
    """Distance of each layer's relative depth from the middle, ``|2·l/(n_layers − 1) − 1|`` (0 middle, 1 ends)."""
    return (2 * layers.double() / max(1, n_layers - 1) - 1).abs()


@dataclass(frozen=True)
class HeadCount:
    """How many heads matter (module docstring) and how many have a non-zero effect.

    ``estimate``: heads whose mean of template means reaches the margin δ; ``low``: heads shown to matter;
    ``high``: heads not shown *not* to matter (both Benjamini–Hochberg at ``α/2``); ``fdr``/``holm``: heads with a
    non-zero effect under Benjamini–Hochberg / Holm at ``α``; ``theta``: each head's mean of template means [head];
    ``clusters``: each pair's unit (template, or the pair's index); ``strata``: operations when templates nest in
    them, else None.
    """

    estimate: int
    low: int
    high: int
    margin: float
    fdr: int
    holm: int
    n_heads: int
    units: str
    theta: Tensor
    clusters: list
    strata: list | None


def count_heads(
    effects: Tensor, templates: list[str] | None, operations: list[str] | None, alpha: float = C_ALPHA
) -> HeadCount:
    """Count the heads that matter and those with a non-zero effect, by tests with templates as units.

    ``effects`` is [pair, head], finite; no ``templates``: pairs as units; ``alpha`` is split ``α/2`` per bound and
    is the FDR.
    """
    n, n_heads = effects.shape
    units, strata, what = list(range(n)), None, "pairs (no templates)"
    if templates and len(set(templates)) >= 2:
        per: dict[str, set[str]] = {}
        for t, o in zip(templates, operations or ["all"] * n):
            per.setdefault(o, set()).add(t)
        units, what = list(templates), f"{len(set(templates))} templates"
        strata = list(operations) if operations and all(len(ts) >= 2 for ts in per.values()) else None
    theta, p0 = cluster_t_test(effects, units, strata)
    margin = C1_MARGIN * float(theta.abs().max())

    def p(null: float, side: str) -> Tensor:
        return cluster_t_test(effects, units, strata, null=null, alternative=side)[1]

    above = (2 * torch.minimum(p(margin, "greater"), p(-margin, "less"))).clamp(max=1.0)
    below = torch.maximum(p(margin, "less"), p(-margin, "greater"))
    return HeadCount(
        estimate=int((theta.abs() >= margin).sum()) if margin > 0 else 0,
        low=int(benjamini_hochberg(above, alpha / 2).sum()),
        high=n_heads - int(benjamini_hochberg(below, alpha / 2).sum()),
        margin=margin,
        fdr=int(benjamini_hochberg(p0, alpha).sum()),
        holm=int(holm(p0, alpha).sum()),
        n_heads=n_heads,
        units=what,
        theta=theta,
        strata=strata,
        clusters=units,
    )


def claim_c1(
    patching: PatchingResult | None,
    key: KeyComponents | None = None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    stage: str = "identify",
    why_missing: str | None = None,
    n_null: int = C1_N_NULL,
) -> Claim:
    """C1: at most 5% of heads matter (counted by tests over heads), and the top heads sit nearer the middle.

    ``key`` is only named in the text (the count does not depend on the selection rule). ``uncertainty`` draws the
    concentration's interval, its seed also the depth null (``n_null`` random head sets), and sets ``α = 1 −
    confidence``. The claim's value is the share of heads that matter, its interval the FDR bounds.
    """
    if patching is None:
        return not_measured("C1", stage, reason=why_missing)
    spec = patching.model
    n_heads = spec.n_layers * spec.n_heads
    m = max(1, math.ceil(C1_MAX_FRACTION * n_heads))
    unit = "share of heads"
    if patching.per_pair_heads is None:
        return claim(
            "C1",
            "no per-pair head effects saved with the patching result",
            Verdict.INCONCLUSIVE,
            "the tests over heads need per-pair effects; re-run identify (keep_per_pair=True)",
            unit=unit,
        )
    e = patching.per_pair_heads.reshape(patching.per_pair_heads.shape[0], -1).double()
    ok = torch.isfinite(e).all(1)
    e = e[ok]
    if e.shape[0] < 2:
        return claim("C1", f"{e.shape[0]} finite pairs", Verdict.INCONCLUSIVE, "too few pairs", unit=unit)
    keep = ok.tolist()

    def rows(xs: list[str]) -> list[str] | None:
        return [x for x, k in zip(xs, keep) if k] if len(xs) == len(keep) else None

    if not bool((e != 0).any()):
        return claim(
            "C1",
            f"every head's effect is exactly 0 on all {e.shape[0]} pairs",
            Verdict.INCONCLUSIVE,
            "no head has any effect under this metric (a saturated answer?), so none can be counted",
            no_estimate(int(e.shape[0])),
            unit=unit,
        )
    alpha = 1 - uncertainty.confidence
    hc = count_heads(e, rows(patching.pair_templates), rows(patching.pair_operations), alpha)
    conc = bias_corrected_bootstrap(
        e, lambda t: concentration(t, m), hc.clusters, hc.strata, uncertainty, bounds=(0.0, 1.0)
    )
    gen = torch.Generator().manual_seed(int(uncertainty.seed))
    top = hc.theta.abs().topk(m).indices
    layers = top // spec.n_heads
    d_obs = float(depth_distance(layers, spec.n_layers).mean())
    all_d = depth_distance(torch.arange(n_heads) // spec.n_heads, spec.n_layers)
    d_null = all_d[torch.rand(n_null, n_heads, generator=gen).argsort(1)[:, :m]].mean(1)
    p_depth = float((1 + (d_null <= d_obs + 1e-12).sum()) / (1 + n_null))
    rel = float((layers.double() / max(1, spec.n_layers - 1)).median())
    heads = "head" if m == 1 else "heads"
    chosen = (
        f". Separately, the selection rule '{key.rule}' chose {_n(len(key.heads), 'key head')}, the set C2–C6 test"
        if key is not None
        else ""
    )
    text = (
        f"{hc.estimate} of {n_heads} heads ({hc.estimate / n_heads:.1%}) reach the margin δ = {hc.margin:.3g} "
        f"(a tenth of the strongest head's); FDR bounds {hc.low} to {_n(hc.high, 'head')} "
        f"({hc.low / n_heads:.1%}–{hc.high / n_heads:.1%}) against the paper's < 5% (at most {_n(m, 'head')}); "
        f"non-zero: {_n(hc.fdr, 'head')} ({hc.fdr / n_heads:.1%}) at a 5% false discovery rate, {hc.holm} under Holm "
        f"(tests over {hc.units}). The top {_n(m, 'head')} {'holds' if m == 1 else 'hold'} "
        f"{fmt_interval(conc.value, conc.low, conc.high, pct=True, digits=0)} "
        f"of the total |effect| (bias-corrected); their median depth {rel:.2f} (middle band "
        f"{C1_BAND[0]}–{C1_BAND[1]}), nearer the middle than random sets of {m} {heads}: p = {p_depth:.3f}{chosen}"
    )
    if hc.low > m:
        verdict = Verdict.FAILS
        reason = f"{_n(hc.low, 'head')} shown to matter (FDR {alpha / 2:.1%}), more than 5% of {n_heads} ({m})"
    elif p_depth >= C_NO_BETTER:
        verdict = Verdict.FAILS
        reason = f"the top heads sit no nearer the middle than random heads (depth p = {p_depth:.2f} ≥ {C_NO_BETTER})"
    elif hc.high <= m and p_depth <= C_ALPHA:
        verdict = Verdict.HOLDS
        reason = (
            f"all but {_n(hc.high, 'head')} shown not to matter (FDR {alpha / 2:.1%}): within 5% of {n_heads} ({m}); "
            f"depth p ≤ {C_ALPHA}"
        )
    else:
        verdict = Verdict.INCONCLUSIVE
        why = []
        if hc.high > m:
            why.append(
                f"between {hc.low} and {hc.high} heads may matter (margin δ = {hc.margin:.3g}), against {m} allowed"
            )
        if p_depth > C_ALPHA:
            why.append(f"depth p = {p_depth:.3f} lies between {C_ALPHA} and {C_NO_BETTER}")
        reason = "; ".join(why)
    return claim(
        "C1",
        text,
        verdict,
        reason,
        Interval(hc.estimate / n_heads, hc.low / n_heads, hc.high / n_heads, int(e.shape[0]), method="fdr_bounds"),
        unit=unit,
        n_tests=n_heads,
        correction="benjamini_hochberg",
    )
