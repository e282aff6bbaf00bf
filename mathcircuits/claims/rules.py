"""The verdict rules of the claims card: one function per claim of Zhang et al. (ICML 2024).

Each ``claim_cN`` reads saved results of a run (values, never a model) and returns a
:class:`~mathcircuits.claims.card.Claim`. A rule compares *intervals*, not point
estimates, so a verdict can only be "holds" or "does not hold" when the data are
precise enough; otherwise it is "inconclusive at this sample size". A missing input
(its stage was off) gives "not measured" naming the stage. The rules, with their
thresholds, are written out in ``docs/claims.md``; the constants below are those
thresholds.

Usage::

    card = assess_claims(key=key, knockout={"add": ko}, transfer=tr, attention=att, probes=probes,
                         evals={"base": base, "precise": precise, "full": full})
    print("\\n".join(card.lines()))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from mathcircuits.ablation.transfer import MEASURED
from mathcircuits.claims.card import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, Claim, ClaimsCard, fmt_interval
from mathcircuits.claims.improve import C6_MARGIN, NO_EFFECT, PAPER_C6, c6_verdict
from mathcircuits.patching.selection import median_depth
from mathcircuits.stats import DEFAULT_CONFIDENCE, DEFAULT_N_BOOT, paired_bootstrap, wilson_interval

__all__ = [
    "C1_MAX_FRACTION",
    "C1_BAND",
    "C2_MIN_RATIO",
    "C2_MIN_DROP",
    "C6_MARGIN",
    "PAPER",
    "assess_claims",
    "claim_c1",
    "claim_c2",
    "claim_c3",
    "claim_c4",
    "claim_c5",
    "claim_c6",
    "drop_verdict",
]

C1_MAX_FRACTION = 0.05  # key heads are "sparse" below 5% of all heads (paper §3.2)
C1_BAND = (0.25, 0.75)  # the "middle band" of relative depth, layer / (n_layers − 1)
C2_MIN_RATIO = 3.0  # the key drop must be at least 3× the random drop
C2_MIN_DROP = 0.10  # a drop whose upper end stays below 10 points is no collapse
C2_MIN_BASELINE = 0.5  # below this clean accuracy a knockout cannot show a collapse
C2_RANDOM_FLOOR = 0.01  # random drops below 1 point count as 1 point in the ratio

# (title, the paper's statement, the paper's number and where it is shown)
PAPER: dict[str, tuple[str, str, str]] = {
    "C1": (
        "key heads are sparse, mid-depth",
        "A few attention heads matter for arithmetic, and they lie in a middle band of layers.",
        "< 5% of heads; middle layers (path-patching heatmap, §3.2)",
    ),
    "C2": (
        "knocking them out collapses accuracy",
        "Mean-ablating the key heads collapses accuracy, while as many random heads barely matter.",
        "about −70% accuracy for key heads; random heads within 2% (knockout curves, §3.3, Fig. 3)",
    ),
    "C3": (
        "they attend to operands and operator",
        "The key heads attend from the last position to the operands or to the operator.",
        "operand heads and operator heads (attention patterns, §4.1)",
    ),
    "C4": (
        "later MLPs write the answer",
        "MLPs after the key heads turn the moved information into the answer.",
        "answer rises in MLP updates of later layers (unembedding probes, §4.2)",
    ),
    "C5": (
        "the heads transfer",
        "The same heads matter for operations and formats not used to find them.",
        "large drops on other operations, formats and word problems (§3.4)",
    ),
    "C6": PAPER_C6,
}


def _claim(cid: str, measurement: str, verdict: str, reason: str, **kw: Any) -> Claim:
    title, statement, paper = PAPER[cid]
    nan = float("nan")
    fields = {"value": nan, "low": nan, "high": nan, "unit": "", "n": 0} | kw
    return Claim(cid, title, statement, paper, measurement, verdict=verdict, reason=reason, **fields)


def _off(cid: str, stage: str, what: str = "") -> Claim:
    """ "not measured (stage X off)"; ``stage`` may instead be a whole reason (it then has a space)."""
    if " " in stage:
        text = f"not measured ({stage})"
    else:
        text = f"not measured (stage {stage} off{', ' + what if what else ''})"
    return _claim(cid, text, NOT_MEASURED, text)


def _quantiles(xs: Sequence[float], confidence: float) -> tuple[float, float]:
    t = torch.tensor([x for x in xs if not math.isnan(x)], dtype=torch.float64)
    if t.numel() == 0:
        return float("nan"), float("nan")
    a = 1 - confidence
    q = torch.quantile(t, torch.tensor([a / 2, 1 - a / 2], dtype=torch.float64))
    return float(q[0]), float(q[1])


# ----------------------------------------------------------------------------- C1


def claim_c1(key: Any, confidence: float = DEFAULT_CONFIDENCE, stage: str = "identify") -> Claim:
    """C1: key heads are < 5% of all heads and their median layer lies in the middle band (docs/claims.md).

    Args:
        key: the :class:`~mathcircuits.patching.KeyComponents` with its stability (None: not measured).
        confidence: level of the intervals (the bootstrap resamples' quantiles).
        stage: the stage named when ``key`` is missing.

    Returns:
        The claim.
    """
    if key is None:
        return _off("C1", stage)
    spec = key.model
    total = spec.n_layers * spec.n_heads
    frac = len(key.heads) / total
    depth = median_depth([l for l, _ in key.heads], spec.n_layers)
    if key.rule == "topk" or "fallback" in key.source:
        why = f"rule 'topk' fixes the number of key heads at {len(key.heads)}"
        if "fallback" in key.source:
            why += f" ({key.source['fallback']})"
        return _claim(
            "C1",
            f"{len(key.heads)} of {total} heads ({frac:.1%}), median depth {depth:.2f}; sparsity not tested",
            NOT_MEASURED,
            f"not measured: {why}; select with rule 'zscore' or 'threshold' to test sparsity",
            value=frac,
            unit="share of heads",
        )
    if not key.has_stability:
        return _claim(
            "C1",
            f"{len(key.heads)} of {total} heads ({frac:.1%}), median depth {depth:.2f}; no resamples",
            INCONCLUSIVE,
            "no selection stability saved with the key components, so no interval; re-run identify",
            value=frac,
            unit="share of heads",
        )
    f_lo, f_hi = _quantiles([s / total for s in key.stability_sizes], confidence)
    d_lo, d_hi = _quantiles(list(key.stability_depths), confidence)
    lo_band, hi_band = C1_BAND
    text = (
        f"{len(key.heads)} of {total} heads = {fmt_interval(frac, f_lo, f_hi, pct=True, digits=1)}; "
        f"median depth {fmt_interval(depth, d_lo, d_hi)} (band {lo_band}–{hi_band})"
    )
    if f_hi < C1_MAX_FRACTION and f_lo > 0 and lo_band <= d_lo and d_hi <= hi_band:
        verdict, reason = HOLDS, f"share interval below {C1_MAX_FRACTION:.0%} and depth interval inside the band"
    elif f_lo >= C1_MAX_FRACTION or (not math.isnan(d_hi) and (d_hi < lo_band or d_lo > hi_band)):
        verdict, reason = FAILS, f"share interval at or above {C1_MAX_FRACTION:.0%}, or depth interval outside band"
    else:
        verdict, reason = INCONCLUSIVE, "an interval straddles the 5% line or the band's edge (or resamples pick none)"
    return _claim(
        "C1", text, verdict, reason, value=frac, low=f_lo, high=f_hi, unit="share of heads", n=key.stability_n_boot
    )


# ----------------------------------------------------------------------------- C2 / C5 shared rule


def drop_verdict(d_key: tuple[float, float, float], d_rand: tuple[float, float, float]) -> tuple[str, str]:
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
        return HOLDS, f"key drop interval above the random one and {k:.2f} ≥ {C2_MIN_RATIO:g}× random"
    if k_hi < max(C2_MIN_DROP, need):
        return FAILS, f"even the key drop's upper end {k_hi:.2f} is below {max(C2_MIN_DROP, need):.2f}"
    return INCONCLUSIVE, "the key and random drop intervals overlap, or the ratio is uncertain"


def _k_index(ks: Sequence[int], n_key: int | None) -> int:
    """Index in a knockout's ``ks`` of the point C2 reads: k = the number of key heads, else the smallest
    measured k above it, else the largest k (also when ``n_key`` is None)."""
    above = [i for i, k in enumerate(ks) if n_key is not None and k >= max(n_key, 1)]
    return above[0] if above else len(ks) - 1


def claim_c2(
    knockout: Mapping[str, Any] | None,
    key: Any = None,
    confidence: float = DEFAULT_CONFIDENCE,
    stage: str = "validate",
) -> Claim:
    """C2: knocking out the key heads collapses accuracy while random heads do not (docs/claims.md).

    Args:
        knockout: operation → :class:`~mathcircuits.ablation.KnockoutResult` (None: not measured).
        key: the key components; k = their number (capped by the knockout's largest k).
        confidence: level of the Wilson intervals.
        stage: the stage named when ``knockout`` is missing.

    Returns:
        The claim; its value is the key heads' accuracy change (negative = a drop), pooled over operations.
    """
    if not knockout:
        return _off("C2", stage)
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
        return _claim("C2", "no pairs were knocked out", INCONCLUSIVE, "the knockout has 0 pairs", unit="accuracy")
    base = base_s / n
    if base < C2_MIN_BASELINE:
        return _claim(
            "C2",
            f"clean accuracy on the knockout pairs is {base:.0%} (n={n}): no accuracy to collapse",
            INCONCLUSIVE,
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
    return _claim(
        "C2", text, verdict, reason, value=-d_key[0], low=-d_key[2], high=-d_key[1], unit="accuracy change", n=n
    )


# ----------------------------------------------------------------------------- C3


def claim_c3(
    attention: Any, n_boot: int = DEFAULT_N_BOOT, seed: int = 0, confidence: float = DEFAULT_CONFIDENCE, stage="analyze"
) -> Claim:
    """C3: the key heads attend to operands or operator more than uniform attention would (docs/claims.md).

    Args:
        attention: the :class:`~mathcircuits.analysis.AttentionByRole` of the key heads (None: not measured).
        n_boot: bootstrap resamples of the pairs.
        seed: bootstrap seed.
        confidence: level of the intervals.
        stage: the stage named when ``attention`` is missing.

    Returns:
        The claim; its value is the share of key heads whose excess interval is above 0, and its
        interval runs from that share to the share that may attend (not surely at or below uniform).
    """
    if attention is None:
        return _off("C3", stage)
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
        verdict, reason = HOLDS, f"{a}/{h} heads have an excess interval above 0 on operands or operator"
    elif i >= h / 2:
        verdict, reason = FAILS, f"{i}/{h} heads have both excess intervals at or below 0"
    else:
        verdict, reason = INCONCLUSIVE, f"{a} heads surely attend, {i} surely do not, {h - a - i} undecided"
    n = len(attention.pair_ids)
    return _claim("C3", text, verdict, reason, value=a / h, low=a / h, high=(h - i) / h, unit="share of heads", n=n)


# ----------------------------------------------------------------------------- C4


def claim_c4(
    probes: Any,
    key: Any = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    stage: str = "analyze",
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

    Returns:
        The claim; its value is the first raising layer (``n_layers`` = none).
    """
    if probes is None:
        return _off("C4", stage)
    if key is None:
        return _off("C4", "identify", "no key heads to compare with")
    n_layers = probes.n_layers
    ref = int(math.floor(median_depth([l for l, _ in key.heads], n_layers) * max(1, n_layers - 1)))
    rise = probes.layer_interval("raising", n_boot=n_boot, seed=seed, confidence=confidence)
    lens = probes.layer_interval("lens_top1", n_boot=n_boot, seed=seed, confidence=confidence)

    def show(iv: Any) -> str:
        name = "none" if iv.value >= n_layers else f"L{iv.value:.0f}"
        hi = "none" if iv.high >= n_layers else f"L{iv.high:.0f}"
        return f"{name} [L{iv.low:.0f}, {hi}]"

    text = f"answer first raised by MLP {show(rise)}; logit lens top-1 from {show(lens)}; key heads' median L{ref}"
    if rise.low >= ref and rise.high < n_layers and lens.low >= ref and lens.high < n_layers:
        verdict, reason = HOLDS, f"both layer intervals lie at or after L{ref} and exist in the resamples"
    elif rise.high < ref or rise.low >= n_layers:
        verdict, reason = FAILS, f"the answer is raised before L{ref}, or no MLP raises it in the resamples"
    else:
        verdict, reason = INCONCLUSIVE, f"a layer interval straddles L{ref} or includes 'none'"
    return _claim("C4", text, verdict, reason, value=rise.value, low=rise.low, high=rise.high, unit="layer", n=rise.n)


# ----------------------------------------------------------------------------- C5


def claim_c5(transfer: Any, confidence: float = DEFAULT_CONFIDENCE, stage: str = "validate") -> Claim:
    """C5: on sets not used to find them, ablating the key heads drops accuracy (the C2 rule per set).

    Args:
        transfer: the :class:`~mathcircuits.ablation.TransferResult` (None: not measured).
        confidence: level of the Wilson intervals.
        stage: the stage named when ``transfer`` is missing.

    Returns:
        The claim; its value is the key heads' accuracy change pooled over the measurable held-out sets.
    """
    if transfer is None:
        return _off("C5", stage)
    out = [r for r in transfer.rows if not r["held_in"]]
    if not out:
        return _off(
            "C5",
            "no transfer set beyond the identification data: "
            "no data.heldout_templates, validation.transfer_* off, no benchmarks",
        )
    measured = [r for r in out if r["status"] == MEASURED]
    skipped = [f"{r['dataset']} (clean {r['clean_accuracy']:.2f})" for r in out if r["status"] != MEASURED]
    if not measured:
        return _claim(
            "C5",
            "no set measurable: " + "; ".join(skipped),
            INCONCLUSIVE,
            f"the clean model answers fewer than {transfer.min_clean_accuracy:.0%} (or {transfer.min_correct} items) "
            "of every held-out set, so ablation cannot show transfer",
            unit="accuracy change",
        )
    verdicts = []
    for r in measured:
        d_key = (1 - r["key_ablated_accuracy"], 1 - r["key_high"], 1 - r["key_low"])
        d_rand = (1 - r["random_ablated_accuracy"], 1 - r["random_high"], 1 - r["random_low"])
        verdicts.append(drop_verdict(d_key, d_rand)[0])
    n = sum(r["n_correct"] for r in measured)
    kw = wilson_interval(round(sum(r["key_ablated_accuracy"] * r["n_correct"] for r in measured)), n, confidence)
    per = "; ".join(
        f"{r['dataset']}: {fmt_interval(r['key_drop'], r['key_low'] - 1, r['key_high'] - 1, pct=True, digits=0)} "
        f"vs random {r['random_drop']:+.0%} ({v})"
        for r, v in zip(measured, verdicts)
    )
    if skipped:
        per += "; not measurable on this model: " + "; ".join(skipped)
    h, f = verdicts.count(HOLDS), verdicts.count(FAILS)
    if h > len(verdicts) / 2:
        verdict, reason = HOLDS, f"the knockout rule holds on {h} of {len(verdicts)} measurable held-out sets"
    elif f > len(verdicts) / 2:
        verdict, reason = FAILS, f"the knockout rule fails on {f} of {len(verdicts)} measurable held-out sets"
    else:
        verdict, reason = INCONCLUSIVE, f"holds on {h}, fails on {f} of {len(verdicts)} measurable held-out sets"
    return _claim(
        "C5", per, verdict, reason, value=kw.value - 1, low=kw.low - 1, high=kw.high - 1, unit="accuracy change", n=n
    )


# ----------------------------------------------------------------------------- C6


def _items(res: Any, benches: Sequence[str]) -> list[float] | None:
    per = getattr(res, "item_correct", None)
    if not per or any(b not in per for b in benches):
        return None
    return [float(x) for b in benches for x in per[b]]


def claim_c6(
    evals: Mapping[str, Any] | None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    stage: str = "evaluate",
    precise: str = "",
) -> Claim:
    """C6: full SFT beats base on math; then precise is within 5 points of full on math and of base on generic
    benchmarks (paired bootstrap over the same items; the rule of :func:`~mathcircuits.claims.improve.c6_verdict`).

    Args:
        evals: label → :class:`~mathcircuits.evaluation.EvalResult`, with labels ``base``, ``precise``, ``full``
            (None or empty: not measured).
        n_boot: bootstrap resamples of the items.
        seed: bootstrap seed.
        confidence: level of the intervals.
        stage: the stage named when ``evals`` is missing.
        precise: what "precise" tuned in this run (:func:`~mathcircuits.claims.improve.precise_definition`),
            printed first in the claim's text.

    Returns:
        The claim; its value is precise − full accuracy on the math benchmarks.
    """
    if not evals:
        return _off("C6", stage, "or finetune off, so no tuned model was evaluated")
    missing = [m for m in ("base", "precise", "full") if m not in evals]
    if missing:
        return _off("C6", f"no {', '.join(missing)} model evaluated: finetune.modes lacks it or finetune is off")
    kinds: dict[str, str] = {}
    for r in evals.values():
        kinds.update(r.kinds)
    common = set.intersection(*(set(r.accuracy) for r in evals.values()))
    math_b = sorted(b for b in common if kinds.get(b) in ("math", "arithmetic"))  # word problems + held-out pairs
    gen_b = sorted(b for b in common if kinds.get(b) == "choice")
    if not math_b:
        return _off("C6", "no math evaluated: no held-out arithmetic and no math benchmark in evaluation.benchmarks")
    items = {m: (_items(evals[m], math_b), _items(evals[m], gen_b)) for m in ("base", "precise", "full")}
    if any(v[0] is None for v in items.values()):
        return _claim(
            "C6",
            "accuracies only; no per-item results",
            INCONCLUSIVE,
            "no per-item results (EvalResult.item_correct), so no paired interval; re-run evaluate",
            unit="accuracy difference",
        )
    d_fb = paired_bootstrap(items["full"][0], items["base"][0], n_boot, seed + 2, confidence)
    d_math = paired_bootstrap(items["precise"][0], items["full"][0], n_boot, seed, confidence)
    text = f"full − base on math {d_fb.format('{:+.3f}')}; "
    text += f"precise − full on math ({', '.join(math_b)}): {d_math.format('{:+.3f}')}"
    d_gen = None
    if gen_b and all(v[1] is not None for v in items.values()):
        d_gen = paired_bootstrap(items["precise"][1], items["base"][1], n_boot, seed + 1, confidence)
        text += f"; precise − base on generic ({', '.join(gen_b)}): {d_gen.format('{:+.3f}')}"
    verdict, reason = c6_verdict(d_fb, d_math, d_gen)
    if precise:
        text = f"{precise}. {text}"
    if verdict == INCONCLUSIVE and reason.startswith(NO_EFFECT):
        text = f"{NO_EFFECT}. {text}"
    return _claim(
        "C6",
        text,
        verdict,
        reason,
        value=d_math.value,
        low=d_math.low,
        high=d_math.high,
        unit="accuracy difference",
        n=d_math.n,
    )


# ----------------------------------------------------------------------------- the card


def assess_claims(
    *,
    key: Any = None,
    knockout: Mapping[str, Any] | None = None,
    transfer: Any = None,
    attention: Any = None,
    probes: Any = None,
    evals: Mapping[str, Any] | None = None,
    off: Mapping[str, str] | None = None,
    precise: str = "",
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> ClaimsCard:
    """The claims card C1–C6 from a run's saved results; a missing input makes its claim "not measured".

    Args:
        key: the key components (with their selection stability).
        knockout: operation → knockout result.
        transfer: the transfer result.
        attention: the attention-by-role result of the key heads.
        probes: the MLP probe result.
        evals: label (``base``, ``precise``, ``full``) → evaluation result.
        off: input name (``key``, ``knockout``, ``transfer``, ``attention``, ``probes``, ``evals``) → the stage
            to name when it is missing (default: the stage that writes it).
        precise: what "precise" tuned in this run, printed in C6.
        n_boot: bootstrap resamples.
        seed: bootstrap seed.
        confidence: level of every interval.

    Returns:
        The :class:`ClaimsCard`.
    """
    o = {"key": "identify", "knockout": "validate", "transfer": "validate", "attention": "analyze"}
    o |= {"probes": "analyze", "evals": "evaluate"} | dict(off or {})
    claims = (
        claim_c1(key, confidence, o["key"]),
        claim_c2(knockout, key, confidence, o["knockout"]),
        claim_c3(attention, n_boot, seed, confidence, o["attention"]),
        claim_c4(probes, key, n_boot, seed, confidence, o["probes"]),
        claim_c5(transfer, confidence, o["transfer"]),
        claim_c6(evals, n_boot, seed, confidence, o["evals"], precise),
    )
    return ClaimsCard(claims=claims, confidence=confidence, seed=seed, settings={"n_boot": n_boot})
