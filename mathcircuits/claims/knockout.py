"""The knockout claims: knocking out the key heads collapses accuracy (C2), also on data not used to find them (C5).

Both read an accuracy *drop* with its interval beside the drops of depth-matched random sets of non-key heads
(:class:`~mathcircuits.ablation.RandomControl`) through one rule, :func:`drop_verdict`: a floor on the drop
("collapse") and the key set's empirical p-value in the null. ``docs/claims.md`` writes it out.
"""

from __future__ import annotations

from mathcircuits.ablation import RandomControl, TransferResult
from mathcircuits.ablation.result import MEASURED
from mathcircuits.claims.card import Claim, Verdict, no_estimate
from mathcircuits.claims.paper import (
    C2_MIN_BASELINE,
    C2_MIN_COLLAPSE,
    C2_MIN_DRAWS,
    C_ALPHA,
    C_NO_BETTER,
    claim,
    not_measured,
    pair_interval,
)
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, DEFAULT_UNCERTAINTY, format_points, wilson_interval

__all__: list[str] = []


def drop_verdict(d_key: tuple[float, float, float], p_value: float, n_draws: int) -> tuple[Verdict, str]:
    """The knockout rule shared by C2 and C5, on an accuracy *drop* (positive = accuracy lost).

    ``d_key`` is (drop, low, high) with the key heads ablated; ``p_value`` the key set's empirical p-value among
    the ``n_draws`` depth-matched random sets, ``(1 + #{random drop ≥ key drop}) / (1 + n_draws)``.
    **Holds** when the drop's interval lies at or above :data:`C2_MIN_COLLAPSE` and ``p ≤`` :data:`C_ALPHA`;
    **does not hold** when even the drop's upper end is below the floor, or ``p ≥`` :data:`C_NO_BETTER` (the key
    set hurts no more than a typical random set); else inconclusive.
    """
    _k, k_lo, k_hi = d_key
    floor = C2_MIN_COLLAPSE
    pts = f"{100 * floor:.0f}-point collapse floor"
    if k_hi < floor:
        return Verdict.FAILS, f"even the key drop's upper end ({100 * k_hi:.1f} points) is below the {pts}"
    if p_value >= C_NO_BETTER:
        return Verdict.FAILS, (
            f"p = {p_value:.2f} ≥ {C_NO_BETTER}: the key set drops accuracy no more than a typical random set"
        )
    if k_lo >= floor and p_value <= C_ALPHA:
        return (
            Verdict.HOLDS,
            f"drop interval at or above the {pts} and p = {p_value:.3f} ≤ {C_ALPHA} among {n_draws} random sets",
        )
    few = f"; only {n_draws} random sets (p ≥ {1 / (1 + n_draws):.2f})" if 1 / (1 + n_draws) > C_ALPHA else ""
    return Verdict.INCONCLUSIVE, (
        f"the drop interval ({100 * k_lo:.1f} to {100 * k_hi:.1f} points) straddles the {pts}, or p = "
        f"{p_value:.3f} lies between {C_ALPHA} and {C_NO_BETTER}{few}"
    )


def claim_c2(
    control: RandomControl | None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    stage: str = "validate",
    why_missing: str | None = None,
) -> Claim:
    """C2: knocking out the key set collapses accuracy on fresh pairs while depth-matched random sets do not.

    ``control`` is measured on pairs that did not choose the key set; the drop's interval is over templates within
    operations when there are at least 5 per operation, else over pairs. The claim's value is the key set's
    accuracy change (negative = a drop), pooled over operations.
    """
    if control is None:
        return not_measured("C2", stage, reason=why_missing)
    n = control.n_pairs
    base = control.baseline()
    if base < C2_MIN_BASELINE:
        return claim(
            "C2",
            f"clean accuracy on the knockout pairs is {base:.0%} (n={n}): no accuracy to collapse",
            Verdict.INCONCLUSIVE,
            f"the clean model answers fewer than {C2_MIN_BASELINE:.0%} of the knockout pairs, so a drop cannot show",
            no_estimate(n),
            unit="accuracy change (points)",
        )
    drops = control.clean_correct - control.key_correct
    iv = pair_interval(drops, control.template_ids, control.operations, uncertainty)
    p, pct, m = control.p_value(), control.percentile(), len(control.draws)
    verdict, reason = drop_verdict((iv.value, iv.low, iv.high), p, m)
    null = control.random_drops()
    overlap = control.identification_overlap
    every = " (every one there is)" if control.exhaustive else ""
    text = (
        f"{len(control.key_heads)} key heads: accuracy "
        f"{format_points(-iv.value, -iv.high, -iv.low)}; "
        f"{m} depth-matched random sets{every}: {format_points(-float(null.mean()))} on average, key set at percentile "
        f"{pct:.0f} "
        f"(p = {p:.3f}); n={n} fresh pairs (overlap with identification: {overlap if overlap >= 0 else '?'})"
    )
    if m < C2_MIN_DRAWS and not control.exhaustive:
        reason += f" (fewer than {C2_MIN_DRAWS} random sets: raise validation.control_draws)"
    return claim(
        "C2",
        text,
        verdict,
        reason,
        Interval(-iv.value, -iv.high, -iv.low, n, method=iv.method),
        unit="accuracy change (points)",
        n_tests=1,
    )


def claim_c5(
    transfer: TransferResult | None,
    confidence: float = DEFAULT_CONFIDENCE,
    stage: str = "validate",
    why_missing: str | None = None,
) -> Claim:
    """C5: on sets not used to find them, ablating the key heads drops accuracy (the C2 rule per set).

    Intervals are Wilson's at ``confidence``. The claim's value is the key heads' accuracy change pooled over the
    measurable held-out sets.
    """
    if transfer is None:
        return not_measured("C5", stage, reason=why_missing)
    out = [r for r in transfer.rows if not r.held_in]
    if not out:
        return not_measured(
            "C5",
            reason="no transfer set beyond the identification data: "
            "no data.heldout_templates, validation.transfer_* off, no benchmarks",
        )
    measured = [r for r in out if r.status == MEASURED]
    skipped = [f"{r.dataset} (clean accuracy {r.clean.value:.0%})" for r in out if r.status != MEASURED]
    if not measured:
        return claim(
            "C5",
            "no set measurable: " + "; ".join(skipped),
            Verdict.INCONCLUSIVE,
            f"the clean model answers fewer than {transfer.min_clean_accuracy:.0%} (or {transfer.min_correct} items) "
            "of every held-out set, so ablation cannot show transfer",
            unit="accuracy change (points)",
        )
    verdicts = []
    for r in measured:
        d_key = (1 - r.key.value, 1 - r.key.high, 1 - r.key.low)
        verdicts.append(drop_verdict(d_key, r.p_value, r.n_draws)[0])
    n = sum(r.n_correct for r in measured)
    kw = wilson_interval(round(sum(r.key.value * r.n_correct for r in measured)), n, confidence)
    per = "; ".join(
        f"{r.dataset}: {format_points(r.key_drop, r.key.low - 1, r.key.high - 1)} "
        f"vs random {format_points(r.random_drop)}, p = {r.p_value:.3f} ({v})"
        for r, v in zip(measured, verdicts)
    )
    if skipped:
        per += "; not measurable on this model: " + "; ".join(skipped)
    h, f = verdicts.count(Verdict.HOLDS), verdicts.count(Verdict.FAILS)
    if h > len(verdicts) / 2:
        verdict = Verdict.HOLDS
        reason = f"the knockout rule holds on {h} of {len(verdicts)} measurable held-out sets"
    elif f > len(verdicts) / 2:
        verdict = Verdict.FAILS
        reason = f"the knockout rule fails on {f} of {len(verdicts)} measurable held-out sets"
    else:
        verdict, reason = (
            Verdict.INCONCLUSIVE,
            f"holds on {h}, fails on {f} of {len(verdicts)} measurable held-out sets",
        )
    return claim(
        "C5",
        per,
        verdict,
        reason,
        Interval(kw.value - 1, kw.low - 1, kw.high - 1, n, method="wilson"),
        unit="accuracy change (points)",
        n_tests=len(verdicts),
        correction="majority",
    )
