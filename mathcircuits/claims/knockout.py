"""The knockout claims: knocking out the key heads collapses accuracy (C2), also on data not used to find them (C5).

Both read accuracy *drops* with their intervals through one rule, :func:`drop_verdict`;
``docs/claims.md`` writes it out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mathcircuits.ablation import MEASURED, KnockoutResult, TransferResult
from mathcircuits.claims.card import Claim, Verdict, fmt_interval
from mathcircuits.claims.paper import (
    C2_MIN_BASELINE,
    C2_MIN_DROP,
    C2_MIN_RATIO,
    C2_RANDOM_FLOOR,
    claim,
    not_measured,
)
from mathcircuits.patching import KeyComponents
from mathcircuits.stats import DEFAULT_CONFIDENCE, wilson_interval

__all__ = ["claim_c2", "claim_c5", "drop_verdict"]


def drop_verdict(d_key: tuple[float, float, float], d_rand: tuple[float, float, float]) -> tuple[Verdict, str]:
    """The knockout rule shared by C2 and C5, on accuracy *drops* (positive = accuracy lost).

    Args:
        d_key: (drop, low, high) with the key heads ablated.
        d_rand: (drop, low, high) with as many random heads ablated.

    Returns:
        (verdict, reason).
    """
    k, k_lo, k_hi = d_key
    r, _r_lo, r_hi = d_rand
    need = C2_MIN_RATIO * max(r, C2_RANDOM_FLOOR)
    if k_lo > r_hi and k >= need:
        return Verdict.HOLDS, f"key drop interval above the random one and {k:.2f} ≥ {C2_MIN_RATIO:g}× random"
    if k_hi < max(C2_MIN_DROP, need):
        return Verdict.FAILS, f"even the key drop's upper end {k_hi:.2f} is below {max(C2_MIN_DROP, need):.2f}"
    return Verdict.INCONCLUSIVE, "the key and random drop intervals overlap, or the ratio is uncertain"


def _k_index(ks: Sequence[int], n_key: int | None) -> int:
    """Index in a knockout's ``ks`` of the point C2 reads: k = the number of key heads, else the smallest
    measured k above it, else the largest k (also when ``n_key`` is None)."""
    above = [i for i, k in enumerate(ks) if n_key is not None and k >= max(n_key, 1)]
    return above[0] if above else len(ks) - 1


def claim_c2(
    knockout: Mapping[str, KnockoutResult] | None,
    key: KeyComponents | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    stage: str = "validate",
    why_missing: str | None = None,
) -> Claim:
    """C2: knocking out the key heads collapses accuracy while random heads do not (docs/claims.md).

    Args:
        knockout: operation → :class:`~mathcircuits.ablation.KnockoutResult` (None: not measured).
        key: the key components; k = their number (capped by the knockout's largest k).
        confidence: level of the Wilson intervals.
        stage: the stage named when ``knockout`` is missing.
        why_missing: the whole reason instead, when the input is missing for another reason than its stage being off.

    Returns:
        The claim; its value is the key heads' accuracy change (negative = a drop), pooled over operations.
    """
    if not knockout:
        return not_measured("C2", stage, reason=why_missing)
    base_s = key_s = rand_s = n = rand_n = 0
    per_seed: list[float] = []
    ks = []
    for ko in knockout.values():
        j = _k_index(ko.ks, None if key is None else len(key.heads))
        ks.append(ko.ks[j])
        m = ko.n_pairs
        base_s += round(ko.baseline_accuracy * m)
        key_s += round(ko.ranked_accuracy[j] * m)
        rnd = ko.random_accuracy[:, j]
        rand_s += round(float(rnd.sum()) * m)
        rand_n += rnd.shape[0] * m
        per_seed += [float(x) for x in rnd]
        n += m
    if n == 0:
        return claim(
            "C2", "no pairs were knocked out", Verdict.INCONCLUSIVE, "the knockout has 0 pairs", unit="accuracy"
        )
    base = base_s / n
    if base < C2_MIN_BASELINE:
        return claim(
            "C2",
            f"clean accuracy on the knockout pairs is {base:.0%} (n={n}): no accuracy to collapse",
            Verdict.INCONCLUSIVE,
            f"the clean model answers fewer than {C2_MIN_BASELINE:.0%} of the knockout pairs, so a drop cannot show",
            value=float("nan"),
            unit="accuracy change",
            n=n,
        )
    kw = wilson_interval(key_s, n, confidence)
    rw = wilson_interval(rand_s, rand_n, confidence)
    r_lo, r_hi = min([rw.low, *per_seed]), max([rw.high, *per_seed])
    d_key = (base - kw.value, base - kw.high, base - kw.low)
    d_rand = (base - rw.value, base - r_hi, base - r_lo)
    verdict, reason = drop_verdict(d_key, d_rand)
    k_txt = "/".join(str(k) for k in dict.fromkeys(ks))
    text = (
        f"top {k_txt} heads: accuracy {fmt_interval(-d_key[0], -d_key[2], -d_key[1], pct=True, digits=0)}; "
        f"random: {fmt_interval(-d_rand[0], -d_rand[2], -d_rand[1], pct=True, digits=0)} (n={n})"
    )
    return claim(
        "C2", text, verdict, reason, value=-d_key[0], low=-d_key[2], high=-d_key[1], unit="accuracy change", n=n
    )


def claim_c5(
    transfer: TransferResult | None,
    confidence: float = DEFAULT_CONFIDENCE,
    stage: str = "validate",
    why_missing: str | None = None,
) -> Claim:
    """C5: on sets not used to find them, ablating the key heads drops accuracy (the C2 rule per set).

    Args:
        transfer: the :class:`~mathcircuits.ablation.TransferResult` (None: not measured).
        confidence: level of the Wilson intervals.
        stage: the stage named when ``transfer`` is missing.
        why_missing: the whole reason instead, when the input is missing for another reason than its stage being off.

    Returns:
        The claim; its value is the key heads' accuracy change pooled over the measurable held-out sets.
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
    skipped = [f"{r.dataset} (clean {r.clean_accuracy:.2f})" for r in out if r.status != MEASURED]
    if not measured:
        return claim(
            "C5",
            "no set measurable: " + "; ".join(skipped),
            Verdict.INCONCLUSIVE,
            f"the clean model answers fewer than {transfer.min_clean_accuracy:.0%} (or {transfer.min_correct} items) "
            "of every held-out set, so ablation cannot show transfer",
            unit="accuracy change",
        )
    verdicts = []
    for r in measured:
        d_key = (1 - r.key_ablated_accuracy, 1 - r.key_high, 1 - r.key_low)
        d_rand = (1 - r.random_ablated_accuracy, 1 - r.random_high, 1 - r.random_low)
        verdicts.append(drop_verdict(d_key, d_rand)[0])
    n = sum(r.n_correct for r in measured)
    kw = wilson_interval(round(sum(r.key_ablated_accuracy * r.n_correct for r in measured)), n, confidence)
    per = "; ".join(
        f"{r.dataset}: {fmt_interval(r.key_drop, r.key_low - 1, r.key_high - 1, pct=True, digits=0)} "
        f"vs random {r.random_drop:+.0%} ({v})"
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
        "C5", per, verdict, reason, value=kw.value - 1, low=kw.low - 1, high=kw.high - 1, unit="accuracy change", n=n
    )
