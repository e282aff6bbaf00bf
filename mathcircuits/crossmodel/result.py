"""The values of a two-model comparison: one run's inputs (:class:`RunResults`), the result (:class:`ModelComparison`).

Zhang et al. (ICML 2024) report their findings on several LLMs; a run measures them on one model, and
:func:`compare_runs` puts two runs side by side: the claims cards, the key heads by relative depth,
knockout, attention roles, and where the MLPs raise the answer. Every compared number carries its interval,
and a difference is marked only where the two intervals separate
(:func:`~mathcircuits.crossmodel.measures.separation`).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from mathcircuits._io import SavedResult
from mathcircuits.ablation import KnockoutResult
from mathcircuits.analysis import AttentionByRole, MLPProbeResult
from mathcircuits.claims import ClaimsCard, Verdict
from mathcircuits.crossmodel.measures import Separation
from mathcircuits.models import ModelSpec
from mathcircuits.patching import KeyComponents
from mathcircuits.stats import Interval
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE

__all__ = ["ClaimPair", "ComparedValue", "KeyHeadRow", "ModelComparison", "RunResults"]


@dataclass(frozen=True)
class RunResults:
    """The saved results of one run that the comparison reads (``None`` / empty where a stage was off).

    ``label`` is the model's name on the page; ``knockout`` maps operation → knockout result.
    """

    label: str
    folder: str
    model: ModelSpec
    claims: ClaimsCard
    key: KeyComponents | None = None
    knockout: Mapping[str, KnockoutResult] = field(default_factory=dict)
    attention: AttentionByRole | None = None
    probes: MLPProbeResult | None = None


@dataclass(frozen=True)
class ClaimPair:
    """One claim of the card on both models.

    ``a``/``b`` are the claim's value with its interval (layers as relative depth for C4); ``difference``
    follows the separation rule on them.
    """

    id: str
    title: str
    unit: str
    verdict_a: Verdict
    verdict_b: Verdict
    measurement_a: str
    measurement_b: str
    a: Interval
    b: Interval
    difference: Separation

    @property
    def agree(self) -> bool:
        return self.verdict_a == self.verdict_b


@dataclass(frozen=True)
class ComparedValue:
    """One quantity measured on both models, with its intervals and the separation rule's call."""

    section: str
    quantity: str
    unit: str
    a: Interval
    b: Interval
    difference: Separation
    note: str = ""


@dataclass(frozen=True)
class KeyHeadRow:
    """One key head of one model: where it lies, its effect, and what it attends to (NaN/"" when not analysed)."""

    model: str
    layer: int
    head: int
    relative_depth: float
    effect: float
    stability: float
    role: str
    excess_operands: Interval
    excess_operator: Interval


@dataclass(frozen=True)
class ModelComparison(SavedResult):
    """Two runs of one configuration on two models, compared (see the module docstring)."""

    STAGE = "compare-models"

    labels: tuple[str, str]
    models: tuple[ModelSpec, ModelSpec]
    folders: tuple[str, str]
    claims: tuple[ClaimPair, ...]
    values: tuple[ComparedValue, ...]
    key_heads: tuple[KeyHeadRow, ...]
    confidence: float = DEFAULT_CONFIDENCE
    seed: int = 0

    def said(self, diff: Separation) -> str:
        """The separation in words with the models' names ("gemma-3-270m higher", "overlap")."""
        a, b = self.labels
        return {"A higher": f"{a} higher", "B higher": f"{b} higher"}.get(diff, diff)

    def claims_table(self) -> pd.DataFrame:
        """One row per claim: the verdict and measurement on each model, whether verdicts agree, the separation."""
        a, b = self.labels
        return pd.DataFrame(
            [
                {
                    "claim": c.id,
                    "title": c.title,
                    f"verdict {a}": str(c.verdict_a),
                    f"verdict {b}": str(c.verdict_b),
                    "verdicts agree": c.agree,
                    f"{a}": _fmt(c.a, c.unit),
                    f"{b}": _fmt(c.b, c.unit),
                    "difference": self.said(c.difference),
                }
                for c in self.claims
            ]
        )

    def to_dataframe(self) -> pd.DataFrame:
        """Every compared quantity: section, quantity, each model's value [interval], and the separation."""
        a, b = self.labels
        rows = [
            {
                "section": v.section,
                "quantity": v.quantity,
                a: _fmt(v.a, v.unit),
                b: _fmt(v.b, v.unit),
                "difference": self.said(v.difference),
                "note": v.note,
            }
            for v in self.values
        ]
        return pd.DataFrame(rows, columns=["section", "quantity", a, b, "difference", "note"])

    def key_heads_table(self) -> pd.DataFrame:
        """One row per key head of either model, ordered by model and relative depth."""
        rows = [
            {
                "model": r.model,
                "head": f"L{r.layer}.H{r.head}",
                "relative depth": round(r.relative_depth, 3),
                "effect": r.effect,
                "stability": r.stability,
                "role": r.role,
                "excess on operands": _fmt(r.excess_operands, "share", pct=True),
                "excess on operator": _fmt(r.excess_operator, "share", pct=True),
            }
            for r in sorted(self.key_heads, key=lambda r: (self.labels.index(r.model), r.relative_depth))
        ]
        return pd.DataFrame(rows)

    def separated(self) -> list[str]:
        """The quantities whose intervals separate, as ``"<quantity>: <model> higher"``."""
        out = [f"{c.id} {c.title}: {self.said(c.difference)}" for c in self.claims if c.difference.endswith("higher")]
        out += [f"{v.quantity}: {self.said(v.difference)}" for v in self.values if v.difference.endswith("higher")]
        return out

    def __repr__(self) -> str:
        agree = sum(c.agree for c in self.claims)
        return (
            f"ModelComparison({self.labels[0]!r} vs {self.labels[1]!r}: verdicts agree on {agree}/{len(self.claims)} "
            f"claims; {len(self.separated())} separated differences of {len(self.claims) + len(self.values)})"
        )

    def _repr_html_(self) -> str:
        return f"<p>{html.escape(repr(self))}</p>" + self.claims_table().to_html(index=False, border=0)


def _fmt(iv: Interval, unit: str, pct: bool | None = None) -> str:
    """``"42.0% [30.1%, 55.0%]"`` or ``"0.52 [0.48, 0.55]"``; ``"none"`` for +inf (no such layer), ``"n/a"`` for NaN."""
    if math.isnan(iv.value):
        return "n/a"
    if pct is None:
        pct = unit in ("accuracy", "accuracy change", "accuracy difference", "share of heads", "share")

    def f(x: float) -> str:
        if math.isinf(x):
            return "none"
        return f"{100 * x:.1f}%" if pct else f"{x:.2f}"

    if math.isnan(iv.low) or math.isnan(iv.high):
        return f(iv.value)
    return f"{f(iv.value)} [{f(iv.low)}, {f(iv.high)}]"
