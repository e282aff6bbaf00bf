"""Claims C6 and C6b: precise SFT matches full SFT (and keeps generic ability); precise beats random heads.

Zhang et al. (ICML 2024, §5, Table 1) report that fine-tuning only the key heads ("precise SFT") improves math
about as much as full SFT without harming generic benchmarks. Two things make that testable rather than true by
default:

* **Training must have had an effect.** With too few steps nothing learns and "precise ≈ full" holds trivially,
  so C6 can hold only when full SFT beats base on math.
* **Localisation needs a control.** Wang & Veitch (2025) find that optimally tuned *random* heads can do nearly
  as well as localised ones. C6b — precise beats random heads matched in depth and parameters, each at its own
  best rate — is the localisation claim, a row of its own.

Rules (:data:`~mathcircuits.claims.paper.C6_MARGIN`; written out in ``docs/claims.md``):

* C6 (:func:`c6_verdict`): with ``d_fb`` = full − base on math, ``d_pf`` = precise − full on math,
  ``d_g`` = precise − base on generic (accuracy, 95% intervals): *not measured* without a generic
  benchmark (it could never hold), unless full beats base and ``high(d_pf) < −m`` (*does not hold*);
  *inconclusive (training had no effect)* unless ``low(d_fb) > 0``; then *holds* when
  ``low(d_pf) ≥ −m`` and ``low(d_g) ≥ −m``; *does not hold* when ``high(d_pf) < −m`` or
  ``high(d_g) < −m``; else *inconclusive*.
* C6b (:func:`claim_c6b`): *inconclusive (training had no effect)* unless precise or random beats
  base on math (an interval above 0); then, with ``d_pr`` = precise − random on math: *holds* when
  ``low(d_pr) > 0``; *does not hold* when ``high(d_pr) ≤ 0`` (random heads do at least as well);
  else *inconclusive*.

The unit claims read a :class:`~mathcircuits.finetune.UnitComparison` (the ``compare`` stage), whose intervals
include seed variance.

Example::

    card = with_unit_claims(assess_claims(...), UnitComparison.load("runs/x/compare/units/comparison.json"))
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass

from mathcircuits.claims.card import Claim, ClaimsCard, Verdict
from mathcircuits.claims.paper import C6_MARGIN, claim, not_measured
from mathcircuits.finetune.effects import difference
from mathcircuits.finetune.units import UnitComparison
from mathcircuits.stats import Interval

__all__: list[str] = []

INTERVAL_TEXT = "95% t intervals over items and seeds, seeds − 1 degrees of freedom"
MARGIN_TEXT = f"−{100 * C6_MARGIN:.0f}-point margin"  # "not worse by more than 5 points", as the card prints it


class C6Stop(enum.Enum):
    """Why a C6 or C6b rule stopped before comparing precise with its control; the value is how the card says it."""

    NO_EFFECT = "training had no effect"
    NO_GENERIC = "no generic benchmark"  # C6's generic half is not measured


@dataclass(frozen=True)
class C6Ruling:
    """A C6 or C6b rule's verdict, why in words, and where it stopped short (``None``: it compared).

    ``effect`` is whether training moved math at all (full − base for C6; precise or random − base for C6b).
    """

    verdict: Verdict
    reason: str
    stop: C6Stop | None = None
    effect: bool = True

    def lead(self, text: str) -> str:
        """``text`` led by the stop in words (``"training had no effect. …"``), as the card prints it."""
        return text if self.stop is None else f"{self.stop.value}. {text}"


def precise_definition(n_heads: int, n_kv_shared: int, n_params: int | None = None) -> str:
    """The one definition of "precise", as the card and the tables print it.

    ``n_kv_shared`` counts non-key heads whose keys and values change through shared K/V (``kv_policy="group"``).
    E.g. ``"precise = the 12 key heads' q/k/v/o slices only, no MLPs (812k params); their shared K/V also changes
    22 non-key heads"``.
    """
    params = "" if n_params is None else f" ({n_params / 1e3:.0f}k params)"
    shared = f"; their shared K/V also changes {n_kv_shared} non-key heads" if n_kv_shared else ""
    return f"precise = the {n_heads} key heads' q/k/v/o slices only, no MLPs{params}{shared}"


def c6_verdict(d_full_base: Interval, d_precise_full: Interval, d_generic: Interval | None) -> C6Ruling:
    """The C6 rule on three intervals (accuracy differences; see the module docstring)."""
    m = -C6_MARGIN
    margin = MARGIN_TEXT
    effect = d_full_base.low > 0
    if d_generic is None:  # C6 is "matches full on math AND keeps generic ability": the second half is missing
        if effect and d_precise_full.high < m:
            return C6Ruling(
                Verdict.FAILS,
                f"full beats base and precise − full lies wholly below the {margin}: the math half fails, whatever "
                "a generic benchmark would show",
            )
        why = "" if effect else f"; besides, {C6Stop.NO_EFFECT.value} (full − base {d_full_base.points()})"
        reason = (
            "no generic benchmark has per-item results (evaluation.benchmarks is empty, or names only benchmarks "
            "whose folder was not found), so 'keeps generic "
            f"ability' is not measured and C6 cannot hold{why}; a choice benchmark in evaluation.benchmarks (e.g. "
            "CommonsenseQA, shipped with the set-up) measures it"
        )
        return C6Ruling(Verdict.NOT_MEASURED, reason, C6Stop.NO_GENERIC, effect)
    if not effect:
        reason = (
            f"{C6Stop.NO_EFFECT.value}: full − base on math {d_full_base.points()} does not lie above 0, "
            "so 'precise matches full' would hold trivially"
        )
        return C6Ruling(Verdict.INCONCLUSIVE, reason, C6Stop.NO_EFFECT, effect)
    if d_precise_full.high < m or d_generic.high < m:
        why = f"full beats base, and an interval (precise − full, or generic) lies wholly below the {margin}"
        return C6Ruling(Verdict.FAILS, why)
    if d_precise_full.low >= m and d_generic.low >= m:
        return C6Ruling(Verdict.HOLDS, f"full beats base, and both intervals lie at or above the {margin}")
    return C6Ruling(Verdict.INCONCLUSIVE, f"full beats base, but an interval straddles the {margin}")


def _claim(cid: str, text: str, verdict: Verdict, reason: str, d: Interval) -> Claim:
    return claim(cid, text, verdict, reason, d, unit="accuracy difference (points)")


def _definition(cmp: UnitComparison) -> str:
    recs = cmp.final("precise")
    if not recs:
        return "precise not trained"
    r = recs[0]
    return precise_definition(len(r.heads), len(r.kv_shared_heads), r.n_trainable)


def claim_c6_units(cmp: UnitComparison | None) -> Claim:
    """C6 from a unit comparison: precise vs full on math, precise vs base on generic (seed-and-item intervals).

    The claim's value is precise − full accuracy on the held-out test facts.
    """
    if cmp is None:
        return not_measured("C6", "compare")
    missing = [m for m in ("base", "precise", "full") if not cmp.final(m)]
    if missing:
        return not_measured("C6", reason=f"compare.modes lacks {', '.join(missing)}")
    d_fb = difference(cmp, "full", "base", "math")
    d_pf = difference(cmp, "precise", "full", "math")
    d_g = difference(cmp, "precise", "base", "generic")
    gen = None if math.isnan(d_g.value) else d_g
    ruling = c6_verdict(d_fb, d_pf, gen)
    seeds = len(cmp.final("precise"))
    text = (
        f"{_definition(cmp)}. On held-out facts: full − base {d_fb.points()}; precise − full "
        f"{d_pf.points()}"
        + ("" if gen is None else f"; precise − base on generic {d_g.points()}")
        + f" (holds when these lie at or above the {MARGIN_TEXT}; {seeds} seeds per mode, each at its chosen "
        f"rate; {INTERVAL_TEXT})"
    )
    return _claim("C6", ruling.lead(text), ruling.verdict, ruling.reason, d_pf)


def claim_c6b(cmp: UnitComparison | None) -> Claim:
    """C6b: precise beats depth- and parameter-matched random heads on math (each at its own chosen rate).

    The claim's value is precise − random accuracy on the held-out test facts.
    """
    if cmp is None:
        return not_measured("C6b", "compare")
    missing = [m for m in ("precise", "random") if not cmp.final(m)]
    if missing:
        return not_measured("C6b", reason=f"compare.modes lacks {', '.join(missing)}")
    d = difference(cmp, "precise", "random", "math")
    d_r = difference(cmp, "random", "base", "math")
    d_p = difference(cmp, "precise", "base", "math")
    if not (d_p.low > 0 or d_r.low > 0):
        reason = (
            f"{C6Stop.NO_EFFECT.value}: neither precise − base {d_p.points()} nor random − base "
            f"{d_r.points()} lies above 0, so neither set of heads learned anything to compare"
        )
        ruling = C6Ruling(Verdict.INCONCLUSIVE, reason, C6Stop.NO_EFFECT, effect=False)
    elif d.low > 0:
        ruling = C6Ruling(Verdict.HOLDS, "the precise − random interval lies above 0")
    elif d.high <= 0:
        reason = "the precise − random interval lies at or below 0: random heads do as well or better"
        ruling = C6Ruling(Verdict.FAILS, reason)
    else:
        ruling = C6Ruling(Verdict.INCONCLUSIVE, "the precise − random interval straddles 0")
    n_draws = len(cmp.final("random"))
    text = (
        f"{_definition(cmp)}; random = as many non-key heads per layer, tuning as many KV groups ({n_draws} draws). "
        f"On held-out facts: precise − random {d.points()}; precise − base {d_p.points()}; "
        f"random − base {d_r.points()} ({len(cmp.final('precise'))} precise seeds; {INTERVAL_TEXT})"
    )
    return _claim("C6b", ruling.lead(text), ruling.verdict, ruling.reason, d)


def with_unit_claims(card: ClaimsCard, cmp: UnitComparison) -> ClaimsCard:
    """The card with C6 read from the unit comparison and C6b added after it."""
    c6, c6b = claim_c6_units(cmp), claim_c6b(cmp)
    claims = [c for c in card.claims if c.id not in ("C6", "C6b")]
    at = next((i for i, c in enumerate(card.claims) if c.id == "C6"), len(claims))
    claims[at:at] = [c6, c6b]
    return dataclasses.replace(card, claims=tuple(claims))
