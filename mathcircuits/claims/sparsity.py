"""C1: a few heads carry the effect, and they sit mid-depth. Read by each head's share of the total |effect|.

The paper's number is "< 5% of heads", read strictly: ``m = ⌈5% · H⌉ − 1`` heads at most (13 of 270), the
``m`` heads of largest |θ_h|, where ``θ_h`` is the head's mean of template means
(:func:`~mathcircuits.stats.small_clusters.cluster_t_test`; pairs as units when the pairs carry no template).

* **Few carry most, the rest little.** The concentration ``c`` is the top ``m`` heads' share of the total
  ``Σ_h |θ_h|`` (bias-corrected bootstrap over templates, :func:`concentration`); ``1 − c`` is the share outside
  them. The share is absolute in the sense that matters: a dominant head beside a long tail of small heads has a
  small ``c`` however much larger the first head is than the others. Noise makes every ``|θ̂_h|`` positive, so
  over all heads ``1 − c`` is biased upwards: enough to show the rest is little, not to show it is large. For
  that, ``c_S`` takes the total over the heads that matter (and the top ``m``) only.
* **Heads that matter** are those whose effect is non-zero under Holm's family-wise control at ``α`` over the
  ``H`` heads (the t-test over templates): with 95% confidence every one of them has an effect, so their number is
  a confidence lower bound on how many heads act.
* **Depth** is read on the heads that matter, weighted by their |θ_h|: the effect-weighted distance of their
  layers from the middle against the same weights on random heads (``C1_N_NULL`` draws).

**Holds** when the share outside the top ``m`` heads is at most :data:`C1_MAX_REST` (the upper bound of ``1 − c``,
noise counted against the claim; the few carry at least two thirds) and the depth ``p ≤ α``; **does not hold**
when that share over the heads that matter exceeds :data:`C1_MAX_REST` (the lower bound of ``1 − c_S``, noise not
counted for it) or the depth ``p ≥ 0.5``; else inconclusive.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from mathcircuits.claims.card import Claim, Verdict, fmt_interval, no_estimate
from mathcircuits.claims.paper import (
    C1_BAND,
    C1_MAX_FRACTION,
    C1_MAX_REST,
    C1_N_NULL,
    C_ALPHA,
    C_NO_BETTER,
    claim,
    not_measured,
    p_words,
)
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY
from mathcircuits.stats.small_clusters import cluster_t_test
from mathcircuits.stats.testing import bias_corrected_bootstrap, holm

__all__: list[str] = []


def allowed_heads(n_heads: int) -> int:
    """The most heads "< 5% of heads" allows, strictly: ``⌈5% · H⌉ − 1`` (at least 1)."""
    return max(1, math.ceil(C1_MAX_FRACTION * n_heads - 1e-9) - 1)


def concentration(per_pair: Tensor, m: int, among: Tensor | None = None) -> float:
    """Share of the total |mean effect| held by the ``m`` heads of largest |mean effect| (NaN when every mean is 0).

    ``per_pair`` is [pair, head], heads flattened; ``among``: a mask of the heads counted (default: all).
    """
    a = per_pair.mean(0).abs()
    if among is not None:
        a = a * among
    total = float(a.sum())
    return float(a.topk(m).values.sum()) / total if total > 0 else float("nan")


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}" + ("" if k == 1 else "s")


def depth_distance(layers: Tensor, n_layers: int) -> Tensor:
    """Distance of each layer's relative depth from the middle, ``|2·l/(n_layers − 1) − 1|`` (0 middle, 1 ends)."""
    return (2 * layers.double() / max(1, n_layers - 1) - 1).abs()


def units_of(n: int, templates: list[str] | None, operations: list[str] | None) -> tuple[list, list | None, str]:
    """The units of the tests over heads: templates (within operations when each has two), else pairs."""
    if templates and len(set(templates)) >= 2:
        per: dict[str, set[str]] = {}
        for t, o in zip(templates, operations or ["all"] * n):
            per.setdefault(o, set()).add(t)
        strata = list(operations) if operations and all(len(ts) >= 2 for ts in per.values()) else None
        return list(templates), strata, f"{len(set(templates))} templates"
    return list(range(n)), None, "pairs (no templates)"


def weighted_depth_p(
    theta: Tensor, matter: Tensor, n_layers: int, n_heads: int, n_null: int, seed: int
) -> tuple[float, float]:
    """The effect-weighted depth of the heads that matter and its p-value against random heads.

    ``theta`` [head] (flattened), ``matter`` a mask of the heads that matter. Returns ``(d_obs, p)``: ``d_obs =
    Σ w_h · depth_distance(l_h)`` with ``w = |θ_h| / Σ|θ|`` over those heads; ``p`` places it among ``n_null``
    draws of as many distinct random heads carrying the same weights (``(1 + #{d_null ≤ d_obs}) / (1 + n_null)``).
    """
    idx = torch.nonzero(matter).flatten()
    w = theta.abs()[idx]
    w = w / w.sum()
    dist = depth_distance(torch.arange(theta.numel()) // n_heads, n_layers)
    d_obs = float((w * dist[idx]).sum())
    gen = torch.Generator().manual_seed(int(seed))
    pick = torch.rand(n_null, theta.numel(), generator=gen).argsort(1)[:, : idx.numel()]
    d_null = (dist[pick] * w[None]).sum(1)
    return d_obs, float((1 + (d_null <= d_obs + 1e-12).sum()) / (1 + n_null))


def claim_c1(
    patching: PatchingResult | None,
    key: KeyComponents | None = None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    stage: str = "identify",
    why_missing: str | None = None,
    n_null: int = C1_N_NULL,
) -> Claim:
    """C1 holds when the top ``m`` heads (strictly fewer than :data:`C1_MAX_FRACTION` of all) leave at most
    :data:`C1_MAX_REST` of the total |effect| to the other heads (the upper bound over all heads) and the heads that
    matter (non-zero under Holm), weighted by effect, sit nearer the middle than random heads (depth ``p ≤``
    :data:`C_ALPHA`); does not hold when the rest exceeds :data:`C1_MAX_REST` over the heads that matter (the lower
    bound) or depth ``p ≥`` :data:`C_NO_BETTER`; else inconclusive (module docstring).

    ``key`` is only named in the text (the shares do not depend on the selection rule). ``uncertainty`` draws the
    concentration's interval, its seed also the depth null (``n_null`` random head sets), and sets ``α = 1 −
    confidence``. The claim's value is the top heads' share of the total |effect| with its interval.
    """
    if patching is None:
        return not_measured("C1", stage, reason=why_missing)
    spec = patching.model
    n_heads = spec.n_layers * spec.n_heads
    m = allowed_heads(n_heads)
    unit = "share of the total |effect|"
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
    units, strata, what = units_of(int(e.shape[0]), rows(patching.pair_templates), rows(patching.pair_operations))
    theta, p0 = cluster_t_test(e, units, strata)
    matter = holm(p0, alpha)
    n_matter = int(matter.sum())
    conc = bias_corrected_bootstrap(e, lambda t: concentration(t, m), units, strata, uncertainty, bounds=(0.0, 1.0))
    most = 1 - C1_MAX_REST
    top = theta.abs().topk(m).indices
    counted = matter.clone()
    counted[top] = True
    conc_s = bias_corrected_bootstrap(
        e, lambda t: concentration(t, m, counted), units, strata, uncertainty, bounds=(0.0, 1.0)
    )
    rel = float(((top // spec.n_heads).double() / max(1, spec.n_layers - 1)).median())
    chosen = (
        f". Separately, the selection rule '{key.rule}' chose {_n(len(key.heads), 'key head')}, the set C2–C6 test"
        if key is not None
        else ""
    )
    text = (
        f"the top {_n(m, 'head')} (fewer than 5% of {n_heads}) {'holds' if m == 1 else 'hold'} "
        f"{fmt_interval(conc.value, conc.low, conc.high, pct=True, digits=0)} of the total |effect| "
        f"(bias-corrected; the rest {fmt_interval(1 - conc.value, 1 - conc.high, 1 - conc.low, pct=True, digits=0)}"
        f", the paper's 'few' read as at most {1 - most:.0%} outside them); "
        f"{_n(n_matter, 'head')} ({n_matter / n_heads:.1%}) have a non-zero effect under Holm (family-wise "
        f"{alpha:.0%}, tests over {what}): at least that many act, with {1 - alpha:.0%} confidence; over them "
        f"the rest holds {fmt_interval(1 - conc_s.value, 1 - conc_s.high, 1 - conc_s.low, pct=True, digits=0)}; "
        f"the median depth of the top {_n(m, 'head')} {rel:.2f} (middle band {C1_BAND[0]}–{C1_BAND[1]})"
    )
    if n_matter:
        d_obs, p_depth = weighted_depth_p(theta, matter, spec.n_layers, spec.n_heads, n_null, uncertainty.seed)
        text += (
            f"; the heads that matter, weighted by |effect|, sit {d_obs:.2f} from the middle (0 middle, 1 ends), "
            f"nearer than random heads of the same weights: {p_words(p_depth, n_null)}"
        )
    else:
        p_depth = float("nan")
        text += "; no head's effect is non-zero under Holm, so depth cannot be read"
    text += chosen
    rest_lo, rest_hi = 1 - conc_s.high, 1 - conc.low
    share = f"the share outside the top {_n(m, 'head')}"
    if rest_lo > C1_MAX_REST:
        verdict = Verdict.FAILS
        reason = (
            f"{share} is above {C1_MAX_REST:.0%} even over the heads that matter (its lower bound {rest_lo:.0%}): "
            "the effect is not sparse"
        )
    elif p_depth >= C_NO_BETTER:
        verdict = Verdict.FAILS
        reason = (
            f"the heads that matter sit no nearer the middle than random heads (depth {p_words(p_depth, n_null)} ≥ "
            f"{C_NO_BETTER})"
        )
    elif rest_hi <= C1_MAX_REST and p_depth <= C_ALPHA:
        verdict = Verdict.HOLDS
        reason = (
            f"{share} is at most {C1_MAX_REST:.0%} (its upper bound {rest_hi:.0%}) and depth "
            f"{p_words(p_depth, n_null)} ≤ {C_ALPHA}"
        )
    else:
        verdict = Verdict.INCONCLUSIVE
        why = []
        if rest_hi > C1_MAX_REST:
            why.append(
                f"{share} (lower bound {rest_lo:.0%} over the heads that matter, upper bound {rest_hi:.0%} over all "
                f"heads) straddles {C1_MAX_REST:.0%}"
            )
        if not n_matter:
            why.append("no head's effect is non-zero under Holm, so depth cannot be read")
        elif p_depth > C_ALPHA:
            why.append(f"depth {p_words(p_depth, n_null)} lies between {C_ALPHA} and {C_NO_BETTER}")
        reason = "; ".join(why)
    return claim(
        "C1",
        text,
        verdict,
        reason,
        Interval(conc.value, conc.low, conc.high, int(e.shape[0]), method="bias_corrected_bootstrap"),
        unit=unit,
        n_tests=n_heads,
        correction="holm",
    )
