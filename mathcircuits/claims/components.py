"""The claims about the key components themselves: where the key heads are (C1), what they attend to (C3), and
which MLPs write the answer (C4).

Each rule reads saved results (never a model) and compares intervals, not point estimates;
``docs/claims.md`` writes the rules out.
"""

from __future__ import annotations

import math

from mathcircuits.analysis import AttentionByRole, MLPProbeResult
from mathcircuits.claims.card import Claim, Verdict, fmt_interval
from mathcircuits.claims.paper import C1_BAND, C1_MAX_FRACTION, claim, not_measured, quantiles
from mathcircuits.patching import KeyComponents, median_depth
from mathcircuits.stats import DEFAULT_CONFIDENCE, DEFAULT_N_BOOT, Interval

__all__ = ["claim_c1", "claim_c3", "claim_c4"]


def claim_c1(
    key: KeyComponents | None,
    confidence: float = DEFAULT_CONFIDENCE,
    stage: str = "identify",
    why_missing: str | None = None,
) -> Claim:
    """C1: key heads are < 5% of all heads and their median layer lies in the middle band (docs/claims.md).

    Args:
        key: the :class:`~mathcircuits.patching.KeyComponents` with its stability (None: not measured).
        confidence: level of the intervals (the bootstrap resamples' quantiles).
        stage: the stage named when ``key`` is missing.
        why_missing: the whole reason instead, when the input is missing for another reason than its stage being off.

    Returns:
        The claim.
    """
    if key is None:
        return not_measured("C1", stage, reason=why_missing)
    spec = key.model
    total = spec.n_layers * spec.n_heads
    frac = len(key.heads) / total
    depth = median_depth([l for l, _ in key.heads], spec.n_layers)
    if key.selection is None:
        why = f"no rule chose these {len(key.heads)} heads ({key.source.note or 'given by hand'})"
        return claim(
            "C1",
            f"{len(key.heads)} of {total} heads ({frac:.1%}), median depth {depth:.2f}; sparsity not tested",
            Verdict.NOT_MEASURED,
            f"not measured: {why}; select with rule 'zscore' or 'threshold' to test sparsity",
            value=frac,
            unit="share of heads",
        )
    if key.rule == "topk" or key.source.fallback is not None:
        why = f"rule 'topk' fixes the number of key heads at {len(key.heads)}"
        if key.source.fallback is not None:
            why += f" ({key.source.fallback})"
        return claim(
            "C1",
            f"{len(key.heads)} of {total} heads ({frac:.1%}), median depth {depth:.2f}; sparsity not tested",
            Verdict.NOT_MEASURED,
            f"not measured: {why}; select with rule 'zscore' or 'threshold' to test sparsity",
            value=frac,
            unit="share of heads",
        )
    if not key.has_stability:
        return claim(
            "C1",
            f"{len(key.heads)} of {total} heads ({frac:.1%}), median depth {depth:.2f}; no resamples",
            Verdict.INCONCLUSIVE,
            "no selection stability saved with the key components, so no interval; re-run identify",
            value=frac,
            unit="share of heads",
        )
    f_lo, f_hi = quantiles([s / total for s in key.stability_sizes], confidence)
    d_lo, d_hi = quantiles(list(key.stability_depths), confidence)
    lo_band, hi_band = C1_BAND
    text = (
        f"{len(key.heads)} of {total} heads = {fmt_interval(frac, f_lo, f_hi, pct=True, digits=1)}; "
        f"median depth {fmt_interval(depth, d_lo, d_hi)} (band {lo_band}–{hi_band})"
    )
    if f_hi < C1_MAX_FRACTION and f_lo > 0 and lo_band <= d_lo and d_hi <= hi_band:
        verdict, reason = (
            Verdict.HOLDS,
            f"share interval below {C1_MAX_FRACTION:.0%} and depth interval inside the band",
        )
    elif f_lo >= C1_MAX_FRACTION or (not math.isnan(d_hi) and (d_hi < lo_band or d_lo > hi_band)):
        verdict, reason = (
            Verdict.FAILS,
            f"share interval at or above {C1_MAX_FRACTION:.0%}, or depth interval outside band",
        )
    else:
        verdict, reason = (
            Verdict.INCONCLUSIVE,
            "an interval straddles the 5% line or the band's edge (or resamples pick none)",
        )
    return claim(
        "C1", text, verdict, reason, value=frac, low=f_lo, high=f_hi, unit="share of heads", n=key.stability_n_boot
    )


def claim_c3(
    attention: AttentionByRole | None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    stage: str = "analyze",
    why_missing: str | None = None,
) -> Claim:
    """C3: the key heads attend to operands or operator more than uniform attention would (docs/claims.md).

    Args:
        attention: the :class:`~mathcircuits.analysis.AttentionByRole` of the key heads (None: not measured).
        n_boot: bootstrap resamples of the pairs.
        seed: bootstrap seed.
        confidence: level of the intervals.
        stage: the stage named when ``attention`` is missing.
        why_missing: the whole reason instead, when the input is missing for another reason than its stage being off.

    Returns:
        The claim; its value is the share of key heads whose excess interval is above 0, and its
        interval runs from that share to the share that may attend (not surely at or below uniform).
    """
    if attention is None:
        return not_measured("C3", stage, reason=why_missing)
    df = attention.summary(by_operation=False, n_boot=n_boot, seed=seed, confidence=confidence)
    attends = (df.excess_operands_low > 0) | (df.excess_operator_low > 0)
    ignores = (df.excess_operands_high <= 0) & (df.excess_operator_high <= 0)
    h = len(df)
    a, i = int(attends.sum()), int(ignores.sum())
    best = [
        f"{r.component} {'operands' if r.excess_operands >= r.excess_operator else 'operator'} "
        + (
            fmt_interval(r.excess_operands, r.excess_operands_low, r.excess_operands_high, pct=True, digits=0)
            if r.excess_operands >= r.excess_operator
            else fmt_interval(r.excess_operator, r.excess_operator_low, r.excess_operator_high, pct=True, digits=0)
        )
        for r in df.itertuples()
    ]
    text = f"{a} of {h} key heads attend above uniform (excess share: {'; '.join(best[:4])}" + (
        f"; +{h - 4} more)" if h > 4 else ")"
    )
    if a > h / 2:
        verdict = Verdict.HOLDS
        reason = f"{a}/{h} heads have an excess interval above 0 on operands or operator"
    elif i >= h / 2:
        verdict = Verdict.FAILS
        reason = f"{i}/{h} heads have both excess intervals at or below 0"
    else:
        verdict = Verdict.INCONCLUSIVE
        reason = f"{a} heads surely attend, {i} surely do not, {h - a - i} undecided"
    n = len(attention.pair_ids)
    return claim("C3", text, verdict, reason, value=a / h, low=a / h, high=(h - i) / h, unit="share of heads", n=n)


def claim_c4(
    probes: MLPProbeResult | None,
    key: KeyComponents | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    stage: str = "analyze",
    why_missing: str | None = None,
) -> Claim:
    """C4: the first layer whose MLP raises the answer, and the logit lens's top-1 layer, come at or after the
    key heads' median layer (docs/claims.md).

    Args:
        probes: the :class:`~mathcircuits.analysis.MLPProbeResult` (None: not measured).
        key: the key components (None: not measured).
        n_boot: bootstrap resamples of the pairs.
        seed: bootstrap seed.
        confidence: level of the intervals.
        stage: the stage named when ``probes`` is missing.
        why_missing: the whole reason instead, when the input is missing for another reason than its stage being off.

    Returns:
        The claim; its value is the first raising layer (``n_layers`` = none).
    """
    if probes is None:
        return not_measured("C4", stage, reason=why_missing)
    if key is None:
        return not_measured("C4", "identify", "no key heads to compare with")
    n_layers = probes.n_layers
    ref = int(math.floor(median_depth([l for l, _ in key.heads], n_layers) * max(1, n_layers - 1)))
    rise = probes.layer_interval("raising", n_boot=n_boot, seed=seed, confidence=confidence)
    lens = probes.layer_interval("lens_top1", n_boot=n_boot, seed=seed, confidence=confidence)

    def show(iv: Interval) -> str:
        name = "none" if iv.value >= n_layers else f"L{iv.value:.0f}"
        hi = "none" if iv.high >= n_layers else f"L{iv.high:.0f}"
        return f"{name} [L{iv.low:.0f}, {hi}]"

    text = f"answer first raised by MLP {show(rise)}; logit lens top-1 from {show(lens)}; key heads' median L{ref}"
    if rise.low >= ref and rise.high < n_layers and lens.low >= ref and lens.high < n_layers:
        verdict = Verdict.HOLDS
        reason = f"both layer intervals lie at or after L{ref} and exist in the resamples"
    elif rise.high < ref or rise.low >= n_layers:
        verdict = Verdict.FAILS
        reason = f"the answer is raised before L{ref}, or no MLP raises it in the resamples"
    else:
        verdict = Verdict.INCONCLUSIVE
        reason = f"a layer interval straddles L{ref} or includes 'none'"
    return claim("C4", text, verdict, reason, value=rise.value, low=rise.low, high=rise.high, unit="layer", n=rise.n)
