"""The claims card: the paper's six claims beside this run's measurement, each with a verdict.

A :class:`Claim` is one row; :class:`ClaimsCard` saves and loads itself (JSON), turns into a DataFrame and prints
itself as the first lines of the report stage's CLI summary. The rules are in the other modules of
:mod:`mathcircuits.claims` and in ``docs/claims.md``.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace
from typing import ClassVar, Literal, get_args

import pandas as pd

from mathcircuits._codec import FlatSpec, encode_fields
from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits.stats import Interval, IntervalMethod
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, METHOD_TEXT

#: How a verdict that reads many tests controls for their number (``none``: one test, or a count only).
Correction = Literal["none", "holm", "bonferroni", "benjamini_hochberg", "majority"]

__all__ = [
    "CardSettings",
    "Claim",
    "ClaimsCard",
    "Verdict",
]

#: Interval methods that draw nothing: their intervals have no seed.
_NOT_DRAWN = ("none", "wilson", "cluster_t_few")


def no_estimate(n: int = 0) -> Interval:
    """No measured value (NaN, no interval) over ``n`` pairs/items."""
    return Interval(math.nan, math.nan, math.nan, n, method="none")


#: A claim's estimate when nothing was measured.
NO_ESTIMATE = no_estimate()


class Verdict(str, enum.Enum):
    """What a rule concludes about a claim; its value is the text the card and the report show."""

    HOLDS = "holds"
    PARTLY = "partly holds"  # a claim of two halves (C2, C5): one holds, the other does not
    FAILS = "does not hold"
    INCONCLUSIVE = "inconclusive at this sample size"
    NOT_MEASURED = "not measured"
    NOT_TESTABLE = "not testable on this tokenizer"  # the tokenizer alone gives what the claim would test (N1)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


#: The preset (a file in ``configs/``) whose run measures each claim, named on the claim's "not measured" row.
MEASURED_BY: dict[str, str] = {
    **dict.fromkeys(("C1", "C2", "C3", "C4", "C5"), "configs/default.yaml"),
    **dict.fromkeys(("C6", "C6b"), "configs/improve-cpu.yaml"),  # the compare stage: modes at their own rates
    **dict.fromkeys(("N1", "N2", "N3"), "configs/thorough.yaml"),  # the numbers stage
}


@dataclass(frozen=True)
class Claim:
    """One claim of Zhang et al. (2024) and this run's verdict on it.

    ``paper`` is the paper's number and where it is shown (section / figure / table); ``measurement`` says this
    run's value in words with its interval (or why there is none); ``estimate`` is the measured value with its
    interval (NaN when not measured; its ``n`` counts pairs/items/resamples, 0: not measured; its ``method`` is how
    [low, high] was drawn, ``none`` without one; its level is the card's); ``reason`` names the rule and the numbers
    it compared; ``n_tests`` is how many tests the verdict read (heads, sets, periods × depths) and ``correction``
    how it controls for them.

    Saved flat, as before the estimate was a value: ``value``, ``low``, ``high``, ``n`` and ``interval`` (the
    method).
    """

    id: str
    title: str
    statement: str
    paper: str
    measurement: str
    estimate: Interval
    unit: str
    verdict: Verdict
    reason: str
    n_tests: int = 0
    correction: Correction = "none"

    FLAT: ClassVar[dict[str, FlatSpec]] = {
        "estimate": {"value": "value", "low": "low", "high": "high", "n": "n", "method": "interval"}
    }
    #: The saved keys in their order.
    SAVED_ORDER: ClassVar[tuple[str, ...]] = (
        "id", "title", "statement", "paper", "measurement", "value", "low", "high", "unit", "verdict", "reason", "n",
        "interval", "n_tests", "correction",
    )  # fmt: skip

    def __post_init__(self) -> None:
        for name, value, choices in (
            ("interval", self.estimate.method, get_args(IntervalMethod)),
            ("correction", self.correction, get_args(Correction)),
        ):
            if value not in choices:
                problem = f"claim {self.id}: {name} {value!r} is unknown. "
                raise FixableValueError(problem, f"use one of {list(choices)}.")
        try:
            object.__setattr__(self, "verdict", Verdict(self.verdict))
        except ValueError:
            choices = [v.value for v in Verdict]
            raise FixableValueError(
                f"claim {self.id}: verdict {self.verdict!r} is unknown. ", f"use one of {choices}."
            ) from None

    def at_level(self, confidence: float, seed: int) -> Claim:
        """The claim with its estimate at the card's level and seed (``seed`` −1 where nothing was drawn)."""
        drawn = self.estimate.method not in _NOT_DRAWN
        iv = replace(self.estimate, confidence=confidence, seed=seed if drawn else -1)
        return self if iv == self.estimate else replace(self, estimate=iv)

    @property
    def interval_text(self) -> str:
        """How the interval was drawn and how many tests the verdict read, in words (``""`` when neither)."""
        method = self.estimate.method
        parts = [] if method == "none" else [METHOD_TEXT.get(method, method)]
        if self.n_tests > 1:
            fix = {"none": "uncorrected", "holm": "Holm", "bonferroni": "Bonferroni", "benjamini_hochberg": "BH"}
            fix["majority"] = "a majority must agree"
            parts.append(f"{self.n_tests} tests, {fix[self.correction]}")
        return "; ".join(parts)

    @property
    def preset_text(self) -> str:
        """On a "not measured" row, the preset that measures the claim (``"measured by configs/…"``); else ``""``."""
        preset = MEASURED_BY.get(self.id)
        return f"measured by {preset}" if preset and self.verdict == Verdict.NOT_MEASURED else ""

    @property
    def beyond_paper(self) -> bool:
        """Whether the claim goes beyond Zhang et al. (the N rows: how numbers are represented, docs/claims.md)."""
        return not self.id.startswith("C")


@dataclass(frozen=True)
class CardSettings:
    """How the card's intervals were drawn: bootstrap resamples (the level and seed are the card's)."""

    n_boot: int = 1000


@dataclass(frozen=True, repr=False)
class ClaimsCard(SavedResult):
    """The six claims of the paper with this run's verdicts (see ``docs/claims.md`` for the rules).

    ``confidence`` is the level of every interval and ``seed`` the bootstrap seed they were drawn with.
    """

    STAGE = "report"
    VERSION = 3

    claims: tuple[Claim, ...]
    confidence: float = DEFAULT_CONFIDENCE
    seed: int = 0
    settings: CardSettings = CardSettings()

    def __post_init__(self) -> None:
        # every interval is at the card's level and seed (a claim does not save its own)
        object.__setattr__(self, "claims", tuple(c.at_level(self.confidence, self.seed) for c in self.claims))

    def __getitem__(self, claim_id: str) -> Claim:
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(f"no claim {claim_id!r}; this card has {[c.id for c in self.claims]}.")

    def to_dataframe(self):
        """One row per claim, one column per field listed below."""
        cols = ["id", "title", "verdict", "value", "low", "high", "interval", "unit", "n", "n_tests", "correction"]
        cols += ["measurement", "paper", "reason"]
        rows = [{**encode_fields(cl), "verdict": cl.verdict} for cl in self.claims]
        return pd.DataFrame([{c: r[c] for c in cols} for r in rows], columns=cols)

    def lines(self) -> list[str]:
        """The card as a small text table (the first lines of the report stage's CLI summary)."""
        out = [f"  claims (Zhang et al. 2024) — {self.confidence:.0%} intervals; rules in docs/claims.md"]
        width = max((len(c.title) for c in self.claims), default=10)
        for c in self.claims:
            mark = "+" if c.beyond_paper else " "
            how = f" ({c.interval_text})" if c.interval_text else ""
            how += f" — {c.preset_text}" if c.preset_text else ""
            out.append(f" {mark}{c.id} {c.title:<{width}}  {c.verdict:<32}  {c.measurement}{how}")
        if any(c.beyond_paper for c in self.claims):
            out.append(
                "  + beyond the paper: Zhou et al. 2024, Fu et al. 2026, Kantamneni & Tegmark 2025, Nikankin et al."
            )
        return out

    def summary_items(self) -> list[tuple[str, str]]:
        """Each claim's verdict."""
        return [(c.id, str(c.verdict)) for c in self.claims]


def fmt_interval(value: float, low: float, high: float, pct: bool = False, digits: int = 2) -> str:
    """``"0.42 [0.30, 0.55]"`` (or in percent: ``"42% [30%, 55%]"``); ``"n/a"`` for NaN.

    NaN ``low``: no interval shown; with ``pct``, ``digits`` are the percentage's decimals.
    """
    if value is None or math.isnan(value):
        return "n/a"

    def f(x: float) -> str:
        return f"{100 * x:.{digits}f}%" if pct else f"{x:.{digits}f}"

    if math.isnan(low) or math.isnan(high):
        return f(value)
    return f"{f(value)} [{f(low)}, {f(high)}]"
