"""The values :func:`~mathcircuits.circuit.faithfulness` returns: the faithfulness curve and what it rests on.

``F(C) = (m(C) − m(cf)) / (m(M) − m(cf))`` with ``m`` the whole answer's mean log-probability, ``M`` the
model and ``cf`` the counterfactual run (the zero point): 1 means the circuit alone does what the model
does, 0 means no better than the counterfactual. Each value has a percentile interval from a bootstrap
over templates (clusters; over pairs when an operation has fewer than 5 templates), as ``interval_over`` says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from mathcircuits._io import SavedResult
from mathcircuits.circuit.config import AblationKind, MLPMode, ScanPositions
from mathcircuits.circuit.plateau import PlateauReason
from mathcircuits.models.spec import ModelSpec
from mathcircuits.stats import Interval

__all__ = ["CompletenessRow", "CurvePoint", "Faithfulness", "FaithfulnessSettings"]


@dataclass(frozen=True)
class FaithfulnessSettings:
    """How a faithfulness curve was measured (the arguments of :func:`~mathcircuits.circuit.faithfulness`)."""

    ablations: list[AblationKind] = field(default_factory=list)
    level: str = "edges"
    mlps: MLPMode = "ablate"
    points: int = 0
    n_random: int = 0
    plateau_tol: float = 0.0
    min_gap: float = 0.0
    completeness_sets: int = 0
    minimality_nodes: int = 0
    n_boot: int = 0
    seed: int = 0
    positions: ScanPositions = "query"
    metric: str = "answer_logprob"


@dataclass(frozen=True)
class CurvePoint:
    """Faithfulness of the top-n circuit, and of depth-matched random circuits of its shape.

    ``size``: edges (nodes for a circuit without edges). ``faithfulness``: ``"<ablation>/<level>"`` → value
    with interval. ``random``: one point value per draw, under evaluation ``random_key``.
    """

    size: int
    n_nodes: int
    faithfulness: dict[str, Interval]
    random: tuple[float, ...] = ()
    random_key: str = ""

    def band(self, confidence: float = 0.95) -> tuple[float, float, float]:
        """``(mean, low, high)`` of the random circuits (central ``confidence`` range of the draws; NaN when none)."""
        if not self.random:
            return (math.nan, math.nan, math.nan)
        xs = sorted(self.random)
        lo = xs[int(math.floor((1 - confidence) / 2 * (len(xs) - 1)))]
        hi = xs[int(math.ceil((1 + confidence) / 2 * (len(xs) - 1)))]
        return (sum(xs) / len(xs), lo, hi)


@dataclass(frozen=True)
class CompletenessRow:
    """Wang et al.'s completeness test for a removed set ``K``: ``F(C \\ K)`` against ``F(M \\ K)`` (paired)."""

    removed: tuple[str, ...]
    ablation: str
    circuit: Interval
    model: Interval
    difference: Interval


@dataclass(frozen=True, repr=False)
class Faithfulness(SavedResult):
    """The faithfulness curve of a circuit, its random band, and necessity, completeness and minimality.

    Args:
        n_pairs: the scored pairs, disjoint from the pairs that found the circuit.
        denominator: ``m(M) − m(cf)`` in nats with its interval; ``clean``, ``counterfactual``: its terms.
        ill_conditioned: the denominator is too small to divide by (``rule``, in words); then no ratio.
        primary: the evaluation the plateau and the random band use (``"resample/edges"``, …).
        plateau_size: see :mod:`~mathcircuits.circuit.plateau`; 0 when ``plateau_reason`` is ``"empty"``
            or ``"negative"`` (the whole circuit is worse than the counterfactual: a finding).
        necessity: per ablation, ``F(M \\ C)`` of the plateau circuit (low: the circuit is necessary).
        completeness: per ablation and removed set ``K``, ``F(C \\ K)`` against ``F(M \\ K)``.
        minimality: per ablation and node ``v``, ``F(C) − F(C \\ {v})``.
        interval_over: ``"templates"`` (cluster bootstrap, stratified by operation) or ``"pairs"``.
    """

    VERSION = 2
    STAGE = "circuit"

    model: ModelSpec
    operations: tuple[str, ...]
    templates: tuple[str, ...]
    n_pairs: int
    denominator: Interval
    clean: float
    counterfactual: float
    ill_conditioned: bool
    rule: str
    primary: str
    curve: tuple[CurvePoint, ...] = ()
    plateau_size: int = 0
    plateau_reason: PlateauReason = "plateau"
    plateau_tolerance: float = float("nan")
    plateau_nodes: tuple[str, ...] = ()
    plateau_edges: tuple[str, ...] = ()
    necessity: dict[str, Interval] = field(default_factory=dict)
    completeness: tuple[CompletenessRow, ...] = ()
    minimality: dict[str, dict[str, Interval]] = field(default_factory=dict)
    interval_over: str = "templates"
    confidence: float = 0.95
    settings: FaithfulnessSettings = FaithfulnessSettings()
    seconds: float = float("nan")

    @property
    def whole(self) -> Interval:
        """The primary faithfulness of the whole circuit (NaN when ill-conditioned)."""
        if not self.curve:
            return Interval(math.nan, math.nan, math.nan, self.n_pairs)
        return self.curve[-1].faithfulness[self.primary]

    @property
    def plateau(self) -> CurvePoint | None:
        """The curve point of the smallest circuit that reaches the plateau (None when ill-conditioned)."""
        return next((p for p in self.curve if p.size == self.plateau_size), None)

    def summary(self) -> str:
        """One line: the denominator, and the plateau circuit's faithfulness against its random band."""
        gap = self.denominator.format("{:.2f}")
        if self.ill_conditioned:
            return f"ill-conditioned: m(M) - m(cf) = {gap} nats ({self.rule})"
        p = self.plateau
        assert p is not None
        whole = self.whole.format("{:.3f}")
        null = (
            "the random band"
            if any(q.random for q in self.curve)
            else "the counterfactual (0; no random circuits drawn)"
        )
        if self.plateau_reason == "negative":
            return (
                f"negative faithfulness (a finding): the whole circuit's F = {whole} ({self.primary}) is worse than "
                f"the counterfactual, and no size beats {null}; m(M) - m(cf) = {gap} nats"
            )
        if self.plateau_reason == "empty":
            return (
                f"empty plateau: no size beats {null} ({self.primary}); whole circuit F = {whole}; "
                f"m(M) - m(cf) = {gap} nats"
            )
        mean, lo, hi = p.band(self.confidence)
        rand = f"random {mean:.2f} [{lo:.2f}, {hi:.2f}]" if p.random else "no random circuits drawn"
        unit = "edges" if self.primary.endswith("edges") else "nodes"
        return (
            f"plateau at {p.size} {unit} / {p.n_nodes} nodes: F = {p.faithfulness[self.primary].format('{:.2f}')} "
            f"({self.primary}; {rand}); whole circuit {self.whole.format('{:.2f}')}; m(M) - m(cf) = {gap} nats"
        )

    def curve_frame(self) -> pd.DataFrame:
        """One row per size and evaluation: value, low, high, and the random band of the primary evaluation."""
        rows = []
        for p in self.curve:
            mean, lo, hi = p.band(self.confidence)
            for key, iv in p.faithfulness.items():
                rows.append(
                    {"size": p.size, "nodes": p.n_nodes, "evaluation": key, "faithfulness": iv.value, "low": iv.low,
                     "high": iv.high, "random_mean": mean if key == p.random_key else math.nan,
                     "random_low": lo if key == p.random_key else math.nan,
                     "random_high": hi if key == p.random_key else math.nan}
                )  # fmt: skip
        return pd.DataFrame(rows)

    def summary_items(self) -> list[tuple[str, str]]:
        """Model, operations, pairs, the denominator and the plateau circuit against its random band."""
        return [
            ("model", self.model.name),
            ("operations", ", ".join(self.operations)),
            ("pairs", str(self.n_pairs)),
            ("faithfulness", self.summary()),
        ]
