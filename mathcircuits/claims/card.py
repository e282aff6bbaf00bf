"""The claims card: the paper's six claims beside this run's measurement, each with a verdict.

A :class:`Claim` is one row; :class:`ClaimsCard` saves and loads itself (JSON), turns into a DataFrame and prints
itself as the first lines of the report stage's CLI summary. The rules are in the other modules of
:mod:`mathcircuits.claims` and in ``docs/claims.md``.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Literal, get_args

import pandas as pd

from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits.stats import IntervalMethod
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, METHOD_TEXT

#: How a verdict that reads many tests controls for their number (``none``: one test, or a count only).
Correction = Literal["none", "holm", "bonferroni", "benjamini_hochberg", "majority"]

__all__ = [
    "CardSettings",
    "Claim",
    "ClaimsCard",
    "Verdict",
]


class Verdict(str, enum.Enum):
    """What a rule concludes about a claim; its value is the text the card and the report show."""

    HOLDS = "holds"
    FAILS = "does not hold"
    INCONCLUSIVE = "inconclusive at this sample size"
    NOT_MEASURED = "not measured"
    NOT_TESTABLE = "not testable on this tokenizer"  # the tokenizer alone gives what the claim would test (N1)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


@dataclass(frozen=True)
class Claim:
    """One claim of Zhang et al. (2024) and this run's verdict on it.

    ``paper`` is the paper's number and where it is shown (section / figure / table); ``measurement`` says this
    run's value in words with its interval (or why there is none); ``value``/``low``/``high`` are NaN when not
    measured; ``reason`` names the rule and the numbers it compared; ``n`` counts pairs/items/resamples (0: not
    measured); ``interval`` is how [low, high] was drawn (``none`` without one); ``n_tests`` is how many tests the
    verdict read (heads, sets, periods × depths) and ``correction`` how it controls for them.
    """

    id: str
    title: str
    statement: str
    paper: str
    measurement: str
    value: float
    low: float
    high: float
    unit: str
    verdict: Verdict
    reason: str
    n: int = 0
    interval: IntervalMethod = "none"
    n_tests: int = 0
    correction: Correction = "none"

    def __post_init__(self) -> None:
        for name, choices in (("interval", get_args(IntervalMethod)), ("correction", get_args(Correction))):
            if getattr(self, name) not in choices:
                raise FixableValueError(
                    f"claim {self.id}: {name} {getattr(self, name)!r} is unknown. ", f"use one of {list(choices)}."
                )
        try:
            object.__setattr__(self, "verdict", Verdict(self.verdict))
        except ValueError:
            choices = [v.value for v in Verdict]
            raise FixableValueError(
                f"claim {self.id}: verdict {self.verdict!r} is unknown. ", f"use one of {choices}."
            ) from None

    @property
    def interval_text(self) -> str:
        """How the interval was drawn and how many tests the verdict read, in words (``""`` when neither)."""
        parts = [] if self.interval == "none" else [METHOD_TEXT.get(self.interval, self.interval)]
        if self.n_tests > 1:
            fix = {"none": "uncorrected", "holm": "Holm", "bonferroni": "Bonferroni", "benjamini_hochberg": "BH"}
            fix["majority"] = "a majority must agree"
            parts.append(f"{self.n_tests} tests, {fix[self.correction]}")
        return "; ".join(parts)

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

    def __getitem__(self, claim_id: str) -> Claim:
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(f"no claim {claim_id!r}; this card has {[c.id for c in self.claims]}.")

    def to_dataframe(self):
        """One row per claim, one column per field listed below."""
        cols = ["id", "title", "verdict", "value", "low", "high", "interval", "unit", "n", "n_tests", "correction"]
        cols += ["measurement", "paper", "reason"]
        return pd.DataFrame([{c: getattr(cl, c) for c in cols} for cl in self.claims], columns=cols)

    def lines(self) -> list[str]:
        """The card as a small text table (the first lines of the report stage's CLI summary)."""
        out = [f"  claims (Zhang et al. 2024) — {self.confidence:.0%} intervals; rules in docs/claims.md"]
        width = max((len(c.title) for c in self.claims), default=10)
        for c in self.claims:
            mark = "+" if c.beyond_paper else " "
            how = f" ({c.interval_text})" if c.interval_text else ""
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
