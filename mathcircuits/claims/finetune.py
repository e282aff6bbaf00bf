"""The fine-tuning claim C6 from the ``evaluate`` stage: precise SFT of the key heads matches full SFT on math and
keeps generic ability.

A paired bootstrap over the same items, under the rule of :func:`~mathcircuits.claims.improve.c6_verdict`
(``docs/claims.md``). The ``compare`` stage's units, when they ran, decide C6 instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from mathcircuits.claims.card import Claim, Verdict
from mathcircuits.claims.improve import MARGIN_TEXT, c6_verdict
from mathcircuits.claims.paper import claim, not_measured
from mathcircuits.evaluation import EvalResult
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.bootstrap import paired_bootstrap
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY

__all__: list[str] = []


def _items(res: EvalResult, benches: Sequence[str]) -> list[float] | None:
    per = res.item_correct
    if not per or any(b not in per for b in benches):
        return None
    return [float(x) for b in benches for x in per[b]]


def claim_c6(
    evals: Mapping[str, EvalResult] | None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    stage: str = "evaluate",
    why_missing: str | None = None,
    precise: str = "",
) -> Claim:
    """C6: full SFT beats base on math; then precise is within 5 points of full on math and of base on generic
    benchmarks (paired bootstrap over the same items; the rule of :func:`~mathcircuits.claims.improve.c6_verdict`).

    ``evals`` maps ``base``, ``precise``, ``full`` to results (None or empty: not measured); the three differences
    draw from the seed, +1 and +2. The claim's value is precise − full accuracy on the math benchmarks.
    """
    if not evals:
        return not_measured("C6", stage, "or finetune off, so no tuned model was evaluated", why_missing)
    missing = [m for m in ("base", "precise", "full") if m not in evals]
    if missing:
        return not_measured(
            "C6", reason=f"no {', '.join(missing)} model evaluated: finetune.modes lacks it or finetune is off"
        )
    kinds: dict[str, str] = {}
    for r in evals.values():
        kinds.update(r.kinds)
    common = set.intersection(*(set(r.accuracy) for r in evals.values()))
    math_b = sorted(b for b in common if kinds.get(b) in ("math", "arithmetic"))  # word problems + held-out pairs
    gen_b = sorted(b for b in common if kinds.get(b) == "choice")
    if not math_b:
        return not_measured(
            "C6", reason="no math evaluated: no held-out arithmetic and no math benchmark in evaluation.benchmarks"
        )
    items = {m: (_items(evals[m], math_b), _items(evals[m], gen_b)) for m in ("base", "precise", "full")}
    if any(v[0] is None for v in items.values()):
        return claim(
            "C6",
            "accuracies only; no per-item results",
            Verdict.INCONCLUSIVE,
            "no per-item results (EvalResult.item_correct), so no paired interval; re-run evaluate",
            unit="accuracy difference (points)",
        )
    d_fb = paired_bootstrap(items["full"][0], items["base"][0], replace(uncertainty, seed=uncertainty.seed + 2))
    d_math = paired_bootstrap(items["precise"][0], items["full"][0], uncertainty)
    text = f"full − base on math {d_fb.points()}; "
    text += f"precise − full on math ({', '.join(math_b)}): {d_math.points()}"
    d_gen = None
    if gen_b and all(v[1] is not None for v in items.values()):
        d_gen = paired_bootstrap(items["precise"][1], items["base"][1], replace(uncertainty, seed=uncertainty.seed + 1))
        text += f"; precise − base on generic ({', '.join(gen_b)}): {d_gen.points()}"
    text += f" (holds when full − base lies above 0 and the others at or above the {MARGIN_TEXT})"
    ruling = c6_verdict(d_fb, d_math, d_gen)
    if precise:
        text = f"{precise}. {text}"
    return claim(
        "C6",
        ruling.lead(text),
        ruling.verdict,
        ruling.reason,
        d_math,
        unit="accuracy difference (points)",
    )
