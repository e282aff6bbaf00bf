"""The knockout claims: knocking out the key heads collapses accuracy (C2), also on data not used to find them (C5).

Both read an accuracy *drop* with its interval beside the drops of depth-matched random sets of non-key heads
(:class:`~mathcircuits.ablation.RandomControl`) through one rule, :func:`drop_verdict`: a floor on the drop
("collapse") and the key set's empirical p-value in the null. ``docs/claims.md`` writes it out.
"""

from __future__ import annotations

from mathcircuits.ablation import CrossOperation, RandomControl, TransferResult
from mathcircuits.ablation.cross import jaccard
from mathcircuits.ablation.result import MEASURED
from mathcircuits.claims.card import Claim, Verdict, no_estimate
from mathcircuits.claims.paper import (
    C2_MIN_BASELINE,
    C2_MIN_COLLAPSE,
    C2_MIN_DRAWS,
    C2_RANDOM_MARGIN,
    C2_RANDOM_PAPER,
    C5_MIN_OVERLAP,
    C5_MIN_SETS,
    C_ALPHA,
    C_NO_BETTER,
    both_halves,
    claim,
    few_draws,
    floor_has_room,
    not_measured,
    p_words,
    pair_interval,
)
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, DEFAULT_UNCERTAINTY, format_points, wilson_interval

__all__: list[str] = []


def drop_verdict(d_key: tuple[float, float, float], p_value: float, n_draws: int) -> tuple[Verdict, str]:
    """The key half of the knockout rule shared by C2 and C5, on an accuracy *drop* (positive = accuracy lost).

    ``d_key`` is (drop, low, high) with the key heads ablated; ``p_value`` the key set's empirical p-value among
    the ``n_draws`` depth-matched random sets, ``(1 + #{random drop ≥ key drop}) / (1 + n_draws)``.
    **Holds** when the drop's interval lies at or above :data:`C2_MIN_COLLAPSE` and ``p ≤`` :data:`C_ALPHA` with
    enough draws for p's floor ``1/(n+1)`` to lie below α with room for a tie (:func:`floor_has_room`);
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
    if k_lo >= floor and p_value <= C_ALPHA and floor_has_room(n_draws):
        return (
            Verdict.HOLDS,
            f"drop interval at or above the {pts} and {p_words(p_value, n_draws)} ≤ {C_ALPHA} among {n_draws} random "
            "sets",
        )
    return Verdict.INCONCLUSIVE, (
        f"the drop interval ({100 * k_lo:.1f} to {100 * k_hi:.1f} points) straddles the {pts}, or "
        f"{p_words(p_value, n_draws)} lies between {C_ALPHA} and {C_NO_BETTER}{few_draws(n_draws)}"
    )


def random_verdict(d_random: Interval) -> tuple[Verdict, str]:
    """The random half of C2: as many depth-matched random heads barely matter.

    ``d_random`` is the random sets' mean accuracy drop with its interval. **Holds** when its upper end lies at or
    below the paper's :data:`C2_RANDOM_PAPER` plus the stated margin :data:`C2_RANDOM_MARGIN`; **does not hold**
    when its lower end lies above that line; else inconclusive.
    """
    line = C2_RANDOM_PAPER + C2_RANDOM_MARGIN
    what = f"the random sets' mean drop ({format_points(-d_random.value, -d_random.high, -d_random.low)})"
    paper = f"the paper's {100 * C2_RANDOM_PAPER:.0f} points + a {100 * C2_RANDOM_MARGIN:.0f}-point margin"
    if d_random.high <= line:
        return Verdict.HOLDS, f"{what} lies within {paper}"
    if d_random.low > line:
        return Verdict.FAILS, f"{what} lies beyond {paper}: random heads matter too"
    return Verdict.INCONCLUSIVE, f"{what} straddles {paper}"


def claim_c2(
    control: RandomControl | None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    stage: str = "validate",
    why_missing: str | None = None,
) -> Claim:
    """C2 holds when knocking out the key set drops accuracy on fresh pairs by at least :data:`C2_MIN_COLLAPSE`
    (interval) with ``p ≤`` :data:`C_ALPHA` among depth-matched random sets, *and* the random sets' mean drop
    stays within :data:`C2_RANDOM_PAPER` plus a margin of :data:`C2_RANDOM_MARGIN` (interval); partly holds when
    the key set collapses accuracy and the random sets cost more; does not hold when the key set does not.

    Two halves, each with its rule: the key half :func:`drop_verdict`, the random half :func:`random_verdict`;
    the verdict is :func:`~mathcircuits.claims.paper.both_halves` ("partly holds" when the key set collapses
    accuracy and the random sets cost more than the paper's 2 points; no collapse: does not hold). ``control``
    is measured on pairs that did not choose the key set; the drops' intervals are over
    templates within operations (:func:`~mathcircuits.claims.paper.pair_interval`). The claim's value is the key
    set's accuracy change (negative = a drop), pooled over operations.
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
    # the planned draws set p's floor; a sequential test that stopped early says so (its p = h/L is at least
    # the "no better than a typical draw" threshold, so the key half does not hold whatever the rest would show)
    seq = control.sequential
    p, pct, m = control.p_value(), control.percentile(), seq.n_max
    key_v, key_r = drop_verdict((iv.value, iv.low, iv.high), p, m)
    if seq.stopped_early:
        key_r += f" ({seq.describe()})"
    # per pair, the mean over the draws of the accuracy a random set costs; its interval over templates
    rand_iv = pair_interval(
        control.clean_correct - control.random_correct.mean(0), control.template_ids, control.operations, uncertainty
    )
    rand_v, rand_r = random_verdict(rand_iv)
    null = control.random_drops()
    overlap = control.identification_overlap
    every = " (every one there is)" if control.exhaustive else ""
    text = (
        f"{len(control.key_heads)} key heads: accuracy "
        f"{format_points(-iv.value, -iv.high, -iv.low)}; "
        f"{len(control.draws)} depth-matched random sets{every}: "
        f"{format_points(-rand_iv.value, -rand_iv.high, -rand_iv.low)} on "
        f"average (worst {format_points(-float(null.max()))}; the paper: within {100 * C2_RANDOM_PAPER:.0f} points), "
        f"key set at percentile {pct:.0f} ({p_words(p, m)}); n={n} fresh pairs (overlap with identification: "
        f"{overlap if overlap >= 0 else '?'})"
    )
    if m < C2_MIN_DRAWS and not control.exhaustive:
        key_r += f" (fewer than {C2_MIN_DRAWS} random sets: raise validation.control_draws)"
    verdict = both_halves(key_v, rand_v, control=True)
    reason = f"key half {key_v}: {key_r}; random half {rand_v}: {rand_r}"
    return claim(
        "C2",
        text,
        verdict,
        reason,
        Interval(-iv.value, -iv.high, -iv.low, n, method=iv.method),
        unit="accuracy change (points)",
        n_tests=1,
    )


def overlap_verdict(cross: CrossOperation | None) -> tuple[Verdict | None, str]:
    """The overlap half of C5: each operation's own key set (the pooled set's rule on its own patching result)
    shares heads with the others'. **Holds** when the mean Jaccard index over pairs of operations is at least
    :data:`C5_MIN_OVERLAP`, **does not hold** below it (a set overlap: no sampling interval; how stable the
    selection is, the report's selection-stability section shows). ``None`` when not measured (one operation, or
    no cross-operation result)."""
    if cross is None or len(cross.operations) < 2:
        return None, "the overlap across operations is not measured (fewer than two operations scored)"
    ops = cross.operations
    js = {(a, b): jaccard(cross.key_sets[a], cross.key_sets[b]) for i, a in enumerate(ops) for b in ops[i + 1 :]}
    mean = sum(js.values()) / len(js)
    each = ", ".join(f"{a}–{b} {j:.2f}" for (a, b), j in js.items())
    what = f"operations' own key sets overlap by Jaccard {mean:.2f} on average ({each}; threshold {C5_MIN_OVERLAP})"
    return (Verdict.HOLDS if mean >= C5_MIN_OVERLAP else Verdict.FAILS), what


def word_problem_overlap(transfer: TransferResult) -> str:
    """The paper's comparison with heads found on word problems (GSM8K), in words: not testable when the model
    solves too few word problems (the measured accuracies), else not measured (identification needs
    counterfactual pairs, which real word problems do not have)."""
    words = [r for r in transfer.rows if r.dataset.endswith("word problems")]
    if not words:
        return "overlap with heads found on word problems: not measured (no word-problem set scored)"
    if not any(r.status == MEASURED for r in words):
        accs = ", ".join(f"{r.dataset.removesuffix(' word problems')} {r.clean.value:.0%}" for r in words)
        return (
            f"overlap with heads found on word problems: not testable on this model (it solves {accs}, below "
            f"{transfer.min_clean_accuracy:.0%})"
        )
    return (
        "overlap with heads found on word problems: not measured (identify patches counterfactual pairs, which real "
        "word problems do not have)"
    )


def claim_c5(
    transfer: TransferResult | None,
    confidence: float = DEFAULT_CONFIDENCE,
    stage: str = "validate",
    why_missing: str | None = None,
    cross: CrossOperation | None = None,
) -> Claim:
    """C5 holds when, on held-out sets not used to find them, ablating the key heads drops accuracy (the C2 key
    rule on a majority of at least :data:`C5_MIN_SETS` measurable sets) *and* the operations' own key sets overlap
    by a mean Jaccard index of at least :data:`C5_MIN_OVERLAP`; partly holds when one half holds and the other does
    not; without the overlap (one operation) the transfer half alone, at most inconclusive.

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
    over_v, over_r = overlap_verdict(cross)
    words = word_problem_overlap(transfer)
    if not measured:
        return claim(
            "C5",
            "no set measurable: " + "; ".join(skipped) + f"; {over_r}; {words}",
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
        f"vs random {format_points(r.random_drop)}, {p_words(r.p_value, r.n_draws)} ({v})"
        for r, v in zip(measured, verdicts)
    )
    if skipped:
        per += "; not measurable on this model: " + "; ".join(skipped)
    per += f"; {over_r}; {words}"
    h, f = verdicts.count(Verdict.HOLDS), verdicts.count(Verdict.FAILS)
    of = f"of {len(verdicts)} measurable held-out sets"
    if len(verdicts) < C5_MIN_SETS:
        tr_v, tr_r = (
            Verdict.INCONCLUSIVE,
            f"only {len(verdicts)} measurable held-out set (at least {C5_MIN_SETS} needed for a verdict)",
        )
    elif h > len(verdicts) / 2:
        tr_v, tr_r = Verdict.HOLDS, f"the knockout rule holds on {h} {of}"
    elif f > len(verdicts) / 2:
        tr_v, tr_r = Verdict.FAILS, f"the knockout rule fails on {f} {of}"
    else:
        tr_v, tr_r = Verdict.INCONCLUSIVE, f"holds on {h}, fails on {f} {of}"
    if over_v is None:
        verdict = Verdict.INCONCLUSIVE if tr_v == Verdict.HOLDS else tr_v
        reason = f"transfer half {tr_v}: {tr_r}; overlap half not measured: {over_r}"
    else:
        verdict = both_halves(tr_v, over_v)
        reason = f"transfer half {tr_v}: {tr_r}; overlap half {over_v}: {over_r}"
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
