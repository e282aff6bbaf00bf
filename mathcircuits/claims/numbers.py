"""Claims N1–N3, beyond the paper: how numbers are represented and combined, each against its null.

Zhang et al. (2024) ask which heads and MLPs matter; N1–N3 ask *how* the numbers are carried and combined,
after Zhou et al. (2024), Fu et al. (2026), Kantamneni & Tegmark (2025) and Nikankin et al. (2025). Each rule
reads saved results of the numbers stage (values, never a model), compares intervals with a null, and can come
out "does not hold"; ``docs/claims.md`` writes the rules and thresholds out.

Example::

    card = with_number_claims(card, spectra=sp, probes=pr, helix=hx, patch=hp, neurons=nr)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from scipy.stats import norm

from mathcircuits.claims.card import NO_ESTIMATE, Claim, ClaimsCard, Verdict
from mathcircuits.numbers import HelixPatchResult, HelixResult, NeuronResult, ProbeResult, Spectrum
from mathcircuits.stats import Interval

__all__ = [
    "claim_n1",
    "claim_n2",
    "claim_n3",
]

N1_MIN_CYCLES = 4  # a period counts as periodic structure when the number axis holds at least 4 cycles of it
N3_MAX_SHARE = 0.05  # "a small share": at most 5% of a layer's neurons (Nikankin et al. find about 1.5%)

PAPER_N: dict[str, tuple[str, str, str]] = {
    "N1": (
        "periodic structure beyond the null",
        "Numbers carry periodic features (n mod T) beyond what shuffled order and the tokenizer give.",
        "beyond the paper: Zhou et al. 2024 (spectra, periods 2, 2.5, 5, 10); Fu et al. 2026 (mod-T probes, "
        "κ ≈ 0.96 at T = 2)",
    ),
    "N2": (
        "helix beats PCA, patches causally",
        "A generalised helix fits numbers, and patching its subspace moves the answer more than PCA or random "
        "subspaces of equal dimension.",
        "beyond the paper: Kantamneni & Tegmark 2025 (helix with T = 2, 5, 10, 100; activation patching vs PCA)",
    ),
    "N3": (
        "few heuristic neurons per layer suffice",
        "A small share of each layer's MLP neurons keeps accuracy, and knocking out a prompt's associated neurons "
        "hurts more than as many matched random neurons.",
        "beyond the paper: Nikankin et al. ICLR 2025 (about 1.5% of neurons per layer; associated vs random)",
    ),
}


def _claim(
    cid: str, measurement: str, verdict: Verdict, reason: str, estimate: Interval = NO_ESTIMATE, **kw: Any
) -> Claim:
    title, statement, paper = PAPER_N[cid]
    fields = {"unit": ""} | kw
    return Claim(cid, title, statement, paper, measurement, estimate, verdict=verdict, reason=reason, **fields)


def _off(cid: str, why: str) -> Claim:
    text = f"not measured ({why})"
    return _claim(cid, text, Verdict.NOT_MEASURED, text)


# ----------------------------------------------------------------------------- N1


def _widen(value: float, low: float, high: float, z_from: float, z_to: float) -> tuple[float, float]:
    """An interval at another level: its normal-approximation SE, ``(high − low) / 2z``, times the new ``z``."""
    se = (high - low) / (2 * z_from)
    return value - z_to * se, value + z_to * se


def _probe_beats(probes: ProbeResult, target: str, depth: int, z_from: float, z_to: float) -> bool | None:
    """:meth:`ProbeResult.beats_baselines` with every interval widened to the Bonferroni level (``z_to``)."""
    s = probes.interval(target, depth)
    lo, hi = _widen(s.value, s.low, s.high, z_from, z_to)
    bases = [_widen(b.value, b.low, b.high, z_from, z_to) for b in probes.baselines(target, depth)]
    if all(lo > b_hi for _, b_hi in bases):
        return True
    if any(hi <= b_lo for b_lo, _ in bases):
        return False
    return None


def claim_n1(spectra: Spectrum | None, probes: ProbeResult | None, why_missing: str = "stage numbers off") -> Claim:
    """N1: some period ``T`` (≥ 4 cycles on the axis, its residue not fixed by the read token alone) is above the
    shuffled null and outside the tokenizer baseline in the spectrum, *and* its mod-T probe beats its baselines, at
    the same depth, with every test at the Bonferroni level of the scan over periods and depths (docs/claims.md).

    "Not testable on this tokenizer" when the read token fixes every candidate's residue (a digit-split tokenizer's
    units digit fixes n mod 2, 5 and 10: no reading tells the model's periodic features from the tokenizer's).
    The claim's value is the best candidate's κ with its (unadjusted) interval.
    """
    if spectra is None or probes is None:
        return _off("N1", why_missing)
    n_axis = round(spectra.periods[0])
    periods = [int(t.split()[1]) for t in probes.targets if t.startswith("mod ")]
    cands = [t for t in periods if t * N1_MIN_CYCLES <= n_axis and any(abs(p - t) < 1e-6 for p in spectra.periods)]
    if not cands:
        return _off("N1", f"no probe period with >= {N1_MIN_CYCLES} cycles on the {n_axis}-number axis")
    fixed = [t for t in cands if t in probes.token_periods]
    cands = [t for t in cands if t not in probes.token_periods]
    if not cands:
        text = (
            f"not testable: numbers are read at their last token, which fixes n mod T by itself for every candidate "
            f"T in {fixed}; a whole-number period (one the units digit does not fix, e.g. 4, 20 or 25 on "
            "0–99) would be testable"
        )
        reason = "the tokenizer alone gives every candidate period (docs/claims.md, N1)"
        return _claim("N1", text, Verdict.NOT_TESTABLE, reason, unit="Cohen's κ of mod T")
    n_depths = len(probes.depths) - 1
    m = len(cands) * n_depths  # the scan: every candidate period at every depth
    z_from = float(norm.ppf((1 + spectra.confidence) / 2))
    z_to = float(norm.ppf(1 - (1 - spectra.confidence) / (2 * m)))
    base = {round(p, 6) for p in spectra.baseline_periods}
    held, failed, best = [], 0, None
    for t in cands:
        k = min(range(len(spectra.periods)), key=lambda i: abs(spectra.periods[i] - t))
        in_base = round(float(t), 6) in base
        for d in range(1, len(probes.depths)):
            r = spectra.row_index(probes.depths[d])  # the same depth, by its label
            power = float(spectra.power[r, k])
            low, _ = _widen(power, float(spectra.low[r, k]), float(spectra.high[r, k]), z_from, z_to)
            above_adj, above = low > float(spectra.null_max[r]), bool(spectra.above[r, k])
            iv = probes.interval(f"mod {t}", d)
            if above_adj and not in_base and _probe_beats(probes, f"mod {t}", d, z_from, z_to) is True:
                held.append((t, probes.depths[d]))
                if best is None or iv.value > best[1].value:
                    best = (t, iv)
            elif probes.beats_baselines(f"mod {t}", d) is False or not above:
                failed += 1
    if best is None:  # report the best-scoring candidate at its best depth
        t = max(cands, key=lambda t: probes.interval(f"mod {t}", probes.best_depth(f"mod {t}")).value)
        best = (t, probes.interval(f"mod {t}", probes.best_depth(f"mod {t}")))
    t, iv = best
    b0 = "; depth 0 is a baseline (digit-split tokenizer)" if probes.tokenization == "multi-token" else ""
    untested = f"; not testable here: T in {fixed} (the read token fixes them)" if fixed else ""
    scan = f"{len(cands)} period{'s' * (len(cands) > 1)} x {n_depths} depth{'s' * (n_depths > 1)}"
    text = (
        f"mod {t} κ {iv.format('{:.2f}')}; tokenizer-baseline periods "
        f"{', '.join(f'{p:g}' for p in spectra.baseline_periods) or 'none'}{b0}{untested}; {m} tests "
        f"({scan}), each at level {1 - (1 - spectra.confidence) / m:.4f} "
        "(Bonferroni; intervals widened by their normal approximation)"
    )
    if held:
        where = ", ".join(f"T={t} at depth {d}" for t, d in held[:6])
        verdict, reason = Verdict.HOLDS, f"above the null and beyond the baselines in both tests: {where}"
    elif failed == m:
        verdict, reason = (
            Verdict.FAILS,
            (
                f"for every period T in {cands} and depth, the spectrum is not above the shuffled null, or the mod-T "
                "probe does not beat its baselines (depth 0 / control)"
            ),
        )
    else:
        verdict, reason = (
            Verdict.INCONCLUSIVE,
            "some period is above the null in one test while the other test's intervals overlap, at the "
            f"Bonferroni level of {m} tests",
        )
        if any(round(float(t), 6) in base for t in cands):
            reason += " (or the period is in the tokenizer / token-frequency baseline)"
    return _claim(
        "N1",
        text,
        verdict,
        reason,
        Interval(iv.value, iv.low, iv.high, iv.n, method=iv.method),
        unit=f"Cohen's κ of mod {t}",
        n_tests=m,
        correction="bonferroni",
    )


# ----------------------------------------------------------------------------- N2


def claim_n2(
    helix: HelixResult | None, patch: HelixPatchResult | None, why_missing: str = "stage numbers off"
) -> Claim:
    """N2: at the depth where the full patch moves the answer most, the helix subspace patch moves it more than the
    PCA subspace (paired interval above 0) and more than random subspaces, and the helix fit beats its null.

    The claim's value is the helix patch's share of the full patch's shift, with its interval.
    """
    if helix is None or patch is None:
        return _off("N2", why_missing)
    d = patch.strongest_depth()
    i = patch.depths.index(d)
    full, hx, pca = patch.cell(d, "full"), patch.cell(d, "helix"), patch.cell(d, "pca")
    rand_hi = float(patch.random_draws[i].max()) if patch.random_draws.shape[1] else float("nan")
    frac = (float(patch.fraction[i, 1]), float(patch.fraction_low[i, 1]), float(patch.fraction_high[i, 1]))
    diff = (float(patch.helix_minus_pca[i]), float(patch.diff_low[i]), float(patch.diff_high[i]))
    fit_ok = helix.above_null(d)
    text = (
        f"depth {d}: helix {hx[0]:+.2f} [{hx[1]:+.2f}, {hx[2]:+.2f}], PCA {pca[0]:+.2f}, full {full[0]:+.2f} "
        f"[{full[1]:+.2f}, {full[2]:+.2f}], random ≤ {rand_hi:+.2f} logits; helix − PCA {diff[0]:+.2f} "
        f"[{diff[1]:+.2f}, {diff[2]:+.2f}]; fit R² {float(helix.r2[d]):.2f} (null {float(helix.null_r2[d]):.2f})"
    )
    if not full[1] > 0:
        verdict, reason = (
            Verdict.INCONCLUSIVE,
            "the full-component patch itself does not surely move the answer at any depth",
        )
    elif frac[1] > 1:
        verdict, reason = (
            Verdict.INCONCLUSIVE,
            (
                "the helix subspace moves the answer more than the whole residual does: a possible subspace-patching "
                "illusion (Makelov et al. 2023), not evidence"
            ),
        )
    elif diff[1] > 0 and hx[1] > rand_hi and fit_ok:
        verdict, reason = (
            Verdict.HOLDS,
            "helix − PCA interval above 0, helix above every random subspace, fit above its null",
        )
    elif diff[2] < 0 or hx[2] <= rand_hi or not fit_ok:
        parts = [
            p
            for p, bad in (
                ("PCA moves the answer more (helix − PCA interval below 0)", diff[2] < 0),
                ("the helix is no better than a random subspace", hx[2] <= rand_hi),
                ("the helix fit does not beat its shuffled-label null", not fit_ok),
            )
            if bad
        ]
        verdict, reason = Verdict.FAILS, "; ".join(parts)
    else:
        verdict, reason = Verdict.INCONCLUSIVE, "the helix − PCA interval straddles 0"
    return _claim(
        "N2",
        text,
        verdict,
        reason,
        Interval(frac[0], frac[1], frac[2], len(patch.pairs), method="none"),
        unit="helix patch / full patch (answer shift)",
    )


# ----------------------------------------------------------------------------- N3


def claim_n3(neurons: NeuronResult | None, why_missing: str = "stage numbers off") -> Claim:
    """N3: every analysed layer that is needed (ablating all its neurons, k = 0, loses accuracy: interval below
    1 − margin) keeps accuracy (≥ 1 − margin) with at most 5% of its neurons, and knocking out a prompt's associated
    neurons drops accuracy more than layer-matched random neurons (paired interval above 0).

    A layer that keeps accuracy at k = 0 is not needed: its sufficient share is trivially small, so it is named and
    left out, and the claim holds only with at least one needed layer. "At most 5%" is ``ceil(0.05 · d_mlp)``
    neurons, the grid's own 5% (77 of 1536 is 5.01%). The claim's value is the knockout's extra drop (random −
    associated accuracy), with its interval.
    """
    if neurons is None:
        return _off("N3", why_missing)
    d, floor = neurons.d_mlp, 1 - neurons.margin
    most = math.ceil(N3_MAX_SHARE * d)
    baseline = {t.layer: 0 if t.ks and t.ks[0] == 0 else None for t in neurons.topk}
    unneeded = [t.layer for t in neurons.topk if baseline[t.layer] is not None and t.accuracy[0] >= floor]
    needed = [t for t in neurons.topk if baseline[t.layer] is not None and t.high[0] < floor]
    unsure = [t.layer for t in neurons.topk if t.layer not in unneeded and t not in needed]
    small = bool(needed) and all(t.chosen <= most for t in needed)
    too_big = []
    for t in needed:
        tried = [j for j, k in enumerate(t.ks) if 0 < k <= most]
        if t.chosen > most and tried and t.high[tried[-1]] < floor:
            too_big.append(t.layer)
    ko = neurons.knockout
    share_text = ", ".join(
        f"L{t.layer} {t.chosen / d:.1%}" + (f" (k = 0: {t.accuracy[0]:.2f})" if baseline[t.layer] is not None else "")
        for t in neurons.topk
    )
    text = f"sufficient share per layer: {share_text} (margin {neurons.margin:.0%})"
    if unneeded:
        text += f"; not needed (k = 0 keeps accuracy), left out: {['L%d' % l for l in unneeded]}"
    if ko is not None:
        text += (
            f"; associated knockout accuracy {ko.associated.value:.2f}, random {ko.random.value:.2f} "
            f"[{ko.random.low:.2f}, {ko.random.high:.2f}], extra drop {ko.drop.value:+.2f} "
            f"[{ko.drop.low:+.2f}, {ko.drop.high:+.2f}] ({ko.n_prompts} prompts, {ko.n_random} draws)"
        )
    # the drop's bounds, saved (as always) without its method
    d = ko.drop if ko is not None else None
    estimate = NO_ESTIMATE if d is None else Interval(d.value, d.low, d.high, d.n, method="none")
    fields: dict[str, str] = {"unit": "extra accuracy drop (random − associated knockout)"}
    if too_big or (ko is not None and ko.drop.high <= 0):
        parts = []
        if too_big:
            parts.append(
                f"layers {too_big} lose accuracy with {N3_MAX_SHARE:.0%} of their neurons (interval below "
                f"1 − {neurons.margin:.2f})"
            )
        if ko is not None and ko.drop.high <= 0:
            parts.append("associated neurons hurt no more than matched random ones")
        verdict, reason = Verdict.FAILS, "; ".join(parts)
    elif any(b is None for b in baseline.values()):
        verdict, reason = Verdict.INCONCLUSIVE, "no k = 0 baseline (saved by an earlier version): re-run numbers"
    elif not needed and not unsure:
        verdict, reason = (
            Verdict.INCONCLUSIVE,
            (
                "no analysed layer is needed (each keeps accuracy with all its neurons ablated, k = 0), so a small "
                "sufficient share says nothing"
            ),
        )
    elif small and not unsure and ko is not None and ko.drop.low > 0:
        verdict, reason = (
            Verdict.HOLDS,
            f"every needed layer (k = 0 loses accuracy) needs <= {N3_MAX_SHARE:.0%} of its neurons; extra drop "
            "interval above 0",
        )
    elif ko is None:
        verdict, reason = Verdict.INCONCLUSIVE, "no prompt has an associated neuron (no classified neuron in the top-k)"
    elif unsure:
        verdict, reason = (
            Verdict.INCONCLUSIVE,
            (
                f"layers {unsure}: whether they are needed is not decided (k = 0 accuracy interval straddles "
                f"1 − {neurons.margin:.2f})"
            ),
        )
    else:
        verdict, reason = Verdict.INCONCLUSIVE, "a share or the knockout interval is not decided at this sample size"
    return _claim("N3", text, verdict, reason, estimate, **fields)


# ----------------------------------------------------------------------------- the card


def with_number_claims(
    card: ClaimsCard,
    *,
    spectra: Spectrum | None = None,
    probes: ProbeResult | None = None,
    helix: HelixResult | None = None,
    patch: HelixPatchResult | None = None,
    neurons: NeuronResult | None = None,
    off: Mapping[str, str] | None = None,
) -> ClaimsCard:
    """The card with N1–N3 appended (after the paper's claims).

    ``off`` maps a claim id to why it is not measured (e.g. ``{"N2": "the model answers too few prompts"}``);
    default: "stage numbers off" for a missing input.
    """
    off = dict(off or {})
    rows = (
        claim_n1(spectra, probes, off.get("N1", "stage numbers off")),
        claim_n2(helix, patch, off.get("N2", "stage numbers off")),
        claim_n3(neurons, off.get("N3", "stage numbers off")),
    )
    kept = tuple(c for c in card.claims if not c.id.startswith("N"))
    return dataclasses.replace(card, claims=kept + rows)
