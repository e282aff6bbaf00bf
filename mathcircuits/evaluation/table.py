"""Evaluation results and the comparison table (Zhang et al., ICML 2024, Table 1).

Table 1 of the paper compares fine-tuning methods (full SFT, LoRA, precise SFT of
the arithmetic heads) by accuracy on math and generic benchmarks, each with its
change against the base model, next to training cost (samples/s, tuned
parameters). :class:`EvalResult` holds one model's accuracies; :func:`compare_table`
lays several side by side.

Usage::

    base = evaluate_model(model, tok, ["SVAMP", "ARC-Easy"], label="base")
    table = compare_table({"base": base, "precise SFT": tuned}, baseline_label="base",
                          extra_columns={"tuned params": {"precise SFT": 3.2e6}})
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from mathcircuits._io import SavedResult

__all__ = ["EvalResult", "compare_table", "format_table"]


@dataclass(frozen=True)
class EvalResult(SavedResult):
    """Accuracies of one model: ``accuracy[benchmark]`` in [0, 1] over ``n[benchmark]`` items.

    ``kinds[benchmark]`` is "math" or "choice" (used for the per-kind averages);
    ``settings`` records how the numbers were obtained (prompt style, shots, limit, ...).
    """

    STAGE = "evaluate"

    label: str
    accuracy: dict[str, float]
    n: dict[str, int]
    kinds: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if set(self.accuracy) != set(self.n):
            raise ValueError(
                f"EvalResult {self.label!r}: accuracy has benchmarks {sorted(self.accuracy)} but n has "
                f"{sorted(self.n)}; give both for the same benchmarks."
            )
        bad = {k: v for k, v in self.accuracy.items() if not 0.0 <= v <= 1.0}
        if bad:
            raise ValueError(
                f"EvalResult {self.label!r}: accuracies {bad} are outside [0, 1]; pass fractions, not percent."
            )

    @classmethod
    def from_scores(cls, label: str, scores: Sequence[Any], settings: dict[str, Any] | None = None) -> EvalResult:
        """Collect :class:`~mathcircuits.evaluation.scoring.BenchmarkScore` values into one result."""
        return cls(
            label=label,
            accuracy={s.benchmark: float(s.accuracy) for s in scores},
            n={s.benchmark: int(s.n) for s in scores},
            kinds={s.benchmark: s.kind for s in scores},
            settings=dict(settings or {}) | {"per_benchmark": {s.benchmark: dict(s.settings) for s in scores}},
        )

    def to_dataframe(self):
        """One row per benchmark: label, benchmark, kind, accuracy, n."""

        return pd.DataFrame(
            [
                {"label": self.label, "benchmark": b, "kind": self.kinds.get(b, ""), "accuracy": a, "n": self.n[b]}
                for b, a in self.accuracy.items()
            ],
            columns=["label", "benchmark", "kind", "accuracy", "n"],
        )


def compare_table(
    results: Mapping[str, EvalResult],
    baseline_label: str,
    benchmarks: Sequence[str] | None = None,
    extra_columns: Mapping[str, Mapping[str, Any]] | None = None,
    percent: bool = True,
    averages: bool = True,
):
    """A Table-1-style comparison: one row per model, accuracies and their change against a baseline.

    For each benchmark the table has its accuracy and ``"<benchmark> Δ"`` (accuracy minus the
    baseline's), then per-kind averages (``"math avg"``, ``"choice avg"``; NaN when a row lacks a
    benchmark) and the ``extra_columns``.

    Args:
        results: label → :class:`EvalResult`.
        baseline_label: the row the deltas are taken against (shown first).
        benchmarks: which benchmarks, in order (None: all, in order of appearance).
        extra_columns: column name → {label → value}, e.g. train samples/s, tuned parameters.
        percent: accuracies in percent rather than fractions.
        averages: add the per-kind averages.

    Returns:
        A pandas DataFrame indexed by model label; missing values are NaN.

    Raises:
        KeyError: the baseline is not among the results, or an extra column names unknown labels.
    """

    if baseline_label not in results:
        raise KeyError(
            f"baseline {baseline_label!r} is not among the results {list(results)}; pass one of those labels."
        )
    if benchmarks is None:
        benchmarks = list(dict.fromkeys(b for r in results.values() for b in r.accuracy))
    scale = 100.0 if percent else 1.0
    base = results[baseline_label]
    kinds: dict[str, str] = {}
    for r in results.values():
        kinds.update(r.kinds)
    cols: list[str] = []
    rows: dict[str, dict[str, float]] = {}
    ordered = [baseline_label] + [label for label in results if label != baseline_label]
    for label in ordered:
        r = results[label]
        row: dict[str, float] = {}
        for b in benchmarks:
            acc = r.accuracy.get(b, math.nan) * scale
            ref = base.accuracy.get(b, math.nan) * scale
            row[b], row[f"{b} Δ"] = acc, acc - ref
        rows[label] = row
    for b in benchmarks:
        cols += [b, f"{b} Δ"]
    if averages:
        for kind in sorted({kinds[b] for b in benchmarks if b in kinds}):
            members = [b for b in benchmarks if kinds.get(b) == kind]
            name = f"{kind} avg"
            for row in rows.values():
                vals = [row[b] for b in members]
                row[name] = sum(vals) / len(vals)  # NaN if any is missing
            for row in rows.values():
                row[f"{name} Δ"] = row[name] - rows[baseline_label][name]
            cols += [name, f"{name} Δ"]
    df = pd.DataFrame.from_dict(rows, orient="index", columns=cols)
    df.index.name = "model"
    for name, values in (extra_columns or {}).items():
        unknown = set(values) - set(results)
        if unknown:
            raise KeyError(
                f"extra column {name!r} has labels {sorted(unknown)} that are not results; "
                f"use labels from {list(results)}."
            )
        df[name] = [values.get(label, math.nan) for label in df.index]
    return df


def format_table(df, baseline_label: str | None = None, decimals: int = 1):
    """Paper-style strings: ``"45.6 (+2.3)"``, with each delta folded into its accuracy cell.

    Args:
        df: a table from :func:`compare_table`.
        baseline_label: the row that shows accuracies only (None: the first row).
        decimals: digits after the decimal point.

    Returns:
        A DataFrame of strings without the delta columns; missing values show "–".
    """
    base = df.index[0] if baseline_label is None else baseline_label
    out = df.copy()
    deltas = [c for c in df.columns if c.endswith(" Δ") and c[:-2] in df.columns]

    def cell(label: str, acc: float, delta: float) -> str:
        if math.isnan(acc):
            return "–"
        if label == base or math.isnan(delta):
            return f"{acc:.{decimals}f}"
        return f"{acc:.{decimals}f} ({delta:+.{decimals}f})"

    for d in deltas:
        out[d[:-2]] = [cell(label, a, x) for label, a, x in zip(df.index, df[d[:-2]], df[d])]
    return out.drop(columns=deltas)
