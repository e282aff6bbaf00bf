"""What :func:`~mathcircuits.circuit.mib_scores` returns: :class:`MIBScores`, MIB's curves, CPR and CMD."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from mathcircuits.models.spec import ModelSpec
from mathcircuits.stats import Interval

__all__ = [
    "MIBScores",
]

#: MIB's grid: fractions of the graph's edges (``evaluate_area_under_curve``'s ``percentages``).
MIB_PERCENTAGES: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass(frozen=True)
class PairCurves:
    """``m`` per pair behind a summary, kept so two rankings on the same pairs can be compared pair by pair.

    ``signed``/``absolute``: ``[point][pair]``; ``clean``, ``empty``: ``m(N)`` and ``m(∅)`` per pair; ``rows``: the
    pairs' rows in the evaluated pair set; ``templates``, ``operations``: each pair's (for the bootstrap).
    """

    signed: tuple[tuple[float, ...], ...]
    absolute: tuple[tuple[float, ...], ...]
    clean: tuple[float, ...]
    empty: tuple[float, ...]
    rows: tuple[int, ...]
    templates: tuple[str, ...]
    operations: tuple[str, ...]


@dataclass(frozen=True)
class CurveSummary:
    """The curves of one evaluation with their intervals: ``f`` per point for both rankings, CPR, CMD, ``m(N) − m(∅)``,
    and what the bootstrap resampled (``"templates"``, ``"pairs"`` or ``"none"``)."""

    faithfulness_signed: tuple[Interval, ...]
    faithfulness_absolute: tuple[Interval, ...]
    cpr: Interval
    cmd: Interval
    denominator: Interval
    interval_over: str
    per_pair: PairCurves | None = None


@dataclass(frozen=True, repr=False)
class MIBScores:
    """MIB's circuit metrics of one edge ranking: faithfulness at each percentage, CPR and CMD, with intervals.

    Args:
        model: the model's spec. method: how the edges were scored. metric: ``m`` (``logit_diff``: MIB-style).
        percentages: the grid (fractions of ``n_edges``). n_edges: the graph's edges.
        kept_signed, kept_absolute: the edges each circuit keeps after pruning (signed and absolute ranking).
        faithfulness_signed, faithfulness_absolute: ``f`` at each percentage (the CPR and the CMD curve).
        cpr: area under ``f`` (signed ranking; higher is better). cmd: area under ``|1 − f|`` (absolute; lower).
        denominator: ``m(N) − m(∅)``. clean, counterfactual: ``m(N)`` and ``m(∅)`` (means over pairs).
        n_pairs: pairs scored. dropped: pairs left out (``logit_diff``: answers with no differing shared position).
        interval_over: ``"templates"`` or ``"pairs"``. score_seconds: the scorer's time. seconds: this evaluation's.
        label: ``"MIB-style"`` (see :mod:`~mathcircuits.circuit.mib`).
        per_pair: ``m`` per pair behind the curves (:func:`~.mib.paired_difference` compares two rankings with it).
        level: ``"edge"`` (MIB's circuit track; ``n_edges`` and the kept counts are edges) or ``"node"`` (MIB's
            ``level="node"``: ``n_edges`` and the kept counts are heads and MLPs; :func:`~.mib_nodes.mib_node_scores`).
    """

    model: ModelSpec
    method: str
    metric: str
    percentages: tuple[float, ...]
    n_edges: int
    kept_signed: tuple[int, ...]
    kept_absolute: tuple[int, ...]
    faithfulness_signed: tuple[Interval, ...]
    faithfulness_absolute: tuple[Interval, ...]
    cpr: Interval
    cmd: Interval
    denominator: Interval
    clean: float
    counterfactual: float
    n_pairs: int
    dropped: int
    interval_over: str
    score_seconds: float
    seconds: float
    label: str = "MIB-style"
    level: Literal["edge", "node"] = "edge"
    per_pair: PairCurves | None = None

    @classmethod
    def from_curves(cls, curves: CurveSummary, **fields: Any) -> MIBScores:
        """The scores of ``curves`` and the other ``fields``."""
        return cls(**vars(curves), **fields)

    def __repr__(self) -> str:
        return (
            f"MIBScores({self.method}, {self.model.name}, {self.metric}, {self.label}, {self.level} level: "
            f"CPR {self.cpr.format()}, "
            f"CMD {self.cmd.format()}, {self.n_pairs} pairs)"
        )

    def _repr_html_(self) -> str:
        return f"<p>{self!r}</p>" + self.to_dataframe().to_html(index=False, float_format="{:.3f}".format)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per percentage: edges (or nodes) kept and ``f`` with its interval, for both rankings."""
        rows = []
        for k, p in enumerate(self.percentages):
            s, a = self.faithfulness_signed[k], self.faithfulness_absolute[k]
            rows.append(
                {
                    "percent": 100 * p,
                    f"{self.level}s": int(p * self.n_edges),
                    "kept_signed": self.kept_signed[k],
                    "f_signed": s.value,
                    "f_signed_low": s.low,
                    "f_signed_high": s.high,
                    "kept_absolute": self.kept_absolute[k],
                    "f_absolute": a.value,
                    "f_absolute_low": a.low,
                    "f_absolute_high": a.high,
                }
            )
        return pd.DataFrame(rows)
