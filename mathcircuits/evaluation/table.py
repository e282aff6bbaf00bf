"""Evaluation results and the comparison table (Zhang et al., ICML 2024, Table 1).

Table 1 of the paper compares fine-tuning methods (full SFT, LoRA, precise SFT of
the arithmetic heads) by accuracy on math and generic benchmarks, each with its
change against the base model, next to training cost (samples/s, tuned
parameters). :class:`EvalResult` holds one model's accuracies and its per-item
0/1 correctness; :func:`compare_table` lays several side by side.

Uncertainty. Every accuracy gets a Wilson interval (``k/n``); every change against
the base model gets a paired-bootstrap interval (Koehn 2004, :func:`mathcircuits.stats.paired_bootstrap`)
over the items both models were scored on, so item difficulty cancels. Per-kind averages
(the mean of the benchmarks' accuracies) get a stratified bootstrap: each benchmark's items
are resampled on their own, with the same draw for both models of a difference.

Usage::

    base = evaluate_model(model, tok, ["SVAMP", "ARC-Easy"], label="base")
    table = compare_table({"base": base, "precise SFT": tuned}, baseline_label="base",
                          extra_columns={"tuned params": {"precise SFT": 3.2e6}})
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from torch import Tensor

from mathcircuits._io import SavedResult
from mathcircuits.evaluation.scoring import BenchmarkScore, ScoreSettings
from mathcircuits.stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_UNCERTAINTY,
    Uncertainty,
    bootstrap_indices,
    paired_bootstrap,
    wilson_interval,
)

__all__ = ["ARITHMETIC", "EvalResult", "compare_table", "format_table"]

ARITHMETIC = "held-out arithmetic"  # the benchmark name of the held-out arithmetic pairs (kind "arithmetic")


@dataclass(frozen=True)
class EvalSettings:
    """How a model's benchmarks were scored (the arguments of :func:`~mathcircuits.evaluation.evaluate_model`),
    each benchmark's own :class:`~mathcircuits.evaluation.ScoreSettings`, and the learning rate of a tuned model
    when a comparison selected one."""

    limit: int | None = None
    seed: int = 0
    n_shot: int | None = None
    style: str | None = None
    max_new_tokens: int | None = None
    normalization: str | None = None
    per_benchmark: dict[str, ScoreSettings] = field(default_factory=dict)
    learning_rate: float | None = None


@dataclass(frozen=True, repr=False)
class EvalResult(SavedResult):
    """Accuracies of one model: ``accuracy[benchmark]`` in [0, 1] over ``n[benchmark]`` items.

    ``kinds[benchmark]`` is "math" or "choice" (used for the per-kind averages);
    ``settings`` records how the numbers were obtained (prompt style, shots, limit, ...; None when no
    benchmark was scored);
    ``item_correct[benchmark]`` is the 0/1 outcome per item, in the benchmark's item order (the
    same order for every model scored with the same settings, so that differences can be paired).
    Files of version 2 (before per-item outcomes) load with an empty ``item_correct``.
    """

    STAGE = "evaluate"
    VERSION = 4

    label: str
    accuracy: dict[str, float]
    n: dict[str, int]
    kinds: dict[str, str] = field(default_factory=dict)
    settings: EvalSettings | None = None
    item_correct: dict[str, list[int]] = field(default_factory=dict)

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
        for b, xs in self.item_correct.items():
            if b not in self.accuracy:
                raise ValueError(
                    f"EvalResult {self.label!r}: item_correct has benchmark {b!r} without an accuracy; "
                    f"give item outcomes only for {sorted(self.accuracy)}."
                )
            if len(xs) != self.n[b] or any(x not in (0, 1) for x in xs):
                raise ValueError(
                    f"EvalResult {self.label!r}: item_correct[{b!r}] must hold n={self.n[b]} values of 0 or 1, "
                    f"got {len(xs)} values; pass one 0/1 outcome per scored item."
                )
            if xs and abs(sum(xs) / len(xs) - self.accuracy[b]) > 1e-9:
                raise ValueError(
                    f"EvalResult {self.label!r}: item_correct[{b!r}] averages {sum(xs) / len(xs):.4f} but accuracy "
                    f"is {self.accuracy[b]:.4f}; build both from the same scores (EvalResult.from_scores)."
                )

    def interval(self, benchmark: str, confidence: float = DEFAULT_CONFIDENCE):
        """The Wilson interval of one benchmark's accuracy (an :class:`~mathcircuits.stats.Interval`).

        Args:
            benchmark: a benchmark of this result.
            confidence: nominal coverage.

        Returns:
            The interval of ``accuracy[benchmark]`` over ``n[benchmark]`` items.
        """
        n = self.n[benchmark]
        return wilson_interval(round(self.accuracy[benchmark] * n), n, confidence)

    @classmethod
    def from_scores(
        cls, label: str, scores: Sequence[BenchmarkScore], settings: EvalSettings | None = None
    ) -> EvalResult:
        """Collect :class:`~mathcircuits.evaluation.BenchmarkScore` values into one result.

        Args:
            label: the model's name in the result.
            scores: one per benchmark.
            settings: how they were scored (each score's own settings are added per benchmark).

        Returns:
            The result.
        """
        per = {s.benchmark: s.settings for s in scores}
        return cls(
            label=label,
            accuracy={s.benchmark: float(s.accuracy) for s in scores},
            n={s.benchmark: int(s.n) for s in scores},
            kinds={s.benchmark: s.kind for s in scores},
            settings=dataclasses.replace(settings or EvalSettings(), per_benchmark=per),
            item_correct={s.benchmark: [int(bool(c)) for c in s.correct] for s in scores},
        )

    def with_benchmark(self, benchmark: str, kind: str, correct: Sequence[int]) -> EvalResult:
        """This result with one more benchmark scored per item (e.g. :data:`ARITHMETIC`), listed first.

        Args:
            benchmark: its name (not already in this result).
            kind: "math", "choice" or "arithmetic".
            correct: one 0/1 outcome per item.

        Returns:
            A new :class:`EvalResult`.

        Raises:
            ValueError: the benchmark is already there, or it has no items.
        """
        if benchmark in self.accuracy or not correct:
            raise ValueError(
                f"EvalResult {self.label!r}: cannot add {benchmark!r} with {len(correct)} items "
                f"(it has {sorted(self.accuracy)}); add a new benchmark with at least one item."
            )
        xs = [int(bool(c)) for c in correct]
        return dataclasses.replace(
            self,
            accuracy={benchmark: sum(xs) / len(xs), **self.accuracy},
            n={benchmark: len(xs), **self.n},
            kinds={benchmark: kind, **self.kinds},
            item_correct={benchmark: xs, **self.item_correct},
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

    def summary_items(self) -> list[tuple[str, str]]:
        """The model's label and its accuracy on each benchmark (with the number of items)."""
        return [("model", self.label)] + [(b, f"{a:.1%} (n={self.n[b]})") for b, a in self.accuracy.items()]


def _stratified_means(items: Mapping[str, Tensor], uncertainty: Uncertainty) -> tuple[Tensor, Tensor]:
    """Macro-average over benchmarks of per-item scores, and its stratified bootstrap [n_boot].

    Each benchmark's items are resampled on their own (seed offset by the benchmark's position), so a
    benchmark keeps its weight in the average and two models get the same draw when the same
    ``seed`` is used.
    """
    full, boots = [], []
    for k, x in enumerate(items.values()):
        full.append(x.mean())
        boots.append(x[bootstrap_indices(x.shape[0], uncertainty.n_boot, uncertainty.seed + k)].mean(dim=1))
    return torch.stack(full).mean(), torch.stack(boots).mean(dim=0)


def _quantile_pair(x: Tensor, confidence: float) -> tuple[float, float]:
    alpha = 1 - confidence
    lo, hi = torch.quantile(x, torch.tensor([alpha / 2, 1 - alpha / 2], dtype=x.dtype)).tolist()
    return lo, hi


def compare_table(
    results: Mapping[str, EvalResult],
    baseline_label: str,
    benchmarks: Sequence[str] | None = None,
    extra_columns: Mapping[str, Mapping[str, Any]] | None = None,
    percent: bool = True,
    averages: bool = True,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
):
    """A Table-1-style comparison: one row per model, accuracies and their change against a baseline, with intervals.

    For each benchmark ``b`` the table has ``b`` (accuracy), ``"b low"``/``"b high"`` (its Wilson
    interval), ``"b Δ"`` (accuracy minus the baseline's) and ``"b Δ low"``/``"b Δ high"`` (the
    paired-bootstrap interval of that difference over the items both were scored on; NaN when either
    result lacks per-item outcomes or their item counts differ). Then per-kind averages (``"math avg"``,
    ``"choice avg"``; NaN when a row lacks a benchmark) with the same four interval columns from a
    stratified bootstrap, and the ``extra_columns``.

    Args:
        results: label → :class:`EvalResult`.
        baseline_label: the row the deltas are taken against (shown first).
        benchmarks: which benchmarks, in order (None: all, in order of appearance).
        extra_columns: column name → {label → value}, e.g. train samples/s, tuned parameters.
        percent: accuracies in percent rather than fractions.
        averages: add the per-kind averages.
        uncertainty: the bootstrap of every interval (one seed for every row, so the draws are paired) and the
            Wilson intervals' level.

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
    nan = math.nan
    base = results[baseline_label]
    kinds: dict[str, str] = {}
    for r in results.values():
        kinds.update(r.kinds)
    confidence = uncertainty.confidence

    def items(r: EvalResult, b: str) -> Tensor | None:
        xs = r.item_correct.get(b)
        return torch.tensor(xs, dtype=torch.float64) if xs else None

    cols: list[str] = []
    rows: dict[str, dict[str, float]] = {}
    ordered = [baseline_label] + [label for label in results if label != baseline_label]
    for label in ordered:
        r = results[label]
        row: dict[str, float] = {}
        for b in benchmarks:
            if b in r.accuracy:
                iv = r.interval(b, confidence)
                row[b], row[f"{b} low"], row[f"{b} high"] = r.accuracy[b] * scale, iv.low * scale, iv.high * scale
            else:
                row[b] = row[f"{b} low"] = row[f"{b} high"] = nan
            row[f"{b} Δ"] = row[b] - base.accuracy.get(b, nan) * scale
            a, ref = items(r, b), items(base, b)
            if a is not None and ref is not None and a.shape == ref.shape:
                d = paired_bootstrap(a, ref, uncertainty)
                row[f"{b} Δ low"], row[f"{b} Δ high"] = d.low * scale, d.high * scale
            else:
                row[f"{b} Δ low"] = row[f"{b} Δ high"] = nan
        rows[label] = row
    for b in benchmarks:
        cols += [b, f"{b} low", f"{b} high", f"{b} Δ", f"{b} Δ low", f"{b} Δ high"]
    if averages:
        for kind in sorted({kinds[b] for b in benchmarks if b in kinds}):
            members = [b for b in benchmarks if kinds.get(b) == kind]
            name = f"{kind} avg"
            ref_items = {b: items(base, b) for b in members}
            for label in ordered:
                row, r = rows[label], results[label]
                row[name] = sum(row[b] for b in members) / len(members)  # NaN if any is missing
                row[f"{name} Δ"] = row[name] - sum(rows[baseline_label][b] for b in members) / len(members)
                row[f"{name} low"] = row[f"{name} high"] = row[f"{name} Δ low"] = row[f"{name} Δ high"] = nan
                mine = {b: items(r, b) for b in members}
                if any(x is None for x in mine.values()):
                    continue
                _, boots = _stratified_means(mine, uncertainty)  # type: ignore[arg-type]
                lo, hi = _quantile_pair(boots, confidence)
                row[f"{name} low"], row[f"{name} high"] = lo * scale, hi * scale
                if all(ref_items[b] is not None and ref_items[b].shape == mine[b].shape for b in members):
                    diff = {b: mine[b] - ref_items[b] for b in members}  # type: ignore[operator]
                    _, dboots = _stratified_means(diff, uncertainty)
                    lo, hi = _quantile_pair(dboots, confidence)
                    row[f"{name} Δ low"], row[f"{name} Δ high"] = lo * scale, hi * scale
            cols += [name, f"{name} low", f"{name} high", f"{name} Δ", f"{name} Δ low", f"{name} Δ high"]
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
    """Paper-style strings: ``"45.6 (+2.3 [+0.4, +4.1])"``, each delta and its interval folded into its accuracy cell.

    Args:
        df: a table from :func:`compare_table`.
        baseline_label: the row that shows accuracies only (None: the first row).
        decimals: digits after the decimal point.

    Returns:
        A DataFrame of strings without the delta and interval columns; missing values show "–";
        a delta without an interval shows as ``"(+2.3)"``.
    """
    base = df.index[0] if baseline_label is None else baseline_label
    out = df.copy()
    deltas = [c for c in df.columns if c.endswith(" Δ") and c[:-2] in df.columns]
    bounds = [c for c in df.columns if c.endswith((" low", " high")) and c.rsplit(" ", 1)[0] in df.columns]

    def cell(label: str, acc: float, delta: float, lo: float, hi: float) -> str:
        if math.isnan(acc):
            return "–"
        if label == base or math.isnan(delta):
            return f"{acc:.{decimals}f}"
        f = f"{{:+.{decimals}f}}"
        ci = "" if math.isnan(lo) or math.isnan(hi) else f" [{f.format(lo)}, {f.format(hi)}]"
        return f"{acc:.{decimals}f} ({f.format(delta)}{ci})"

    nan_col = [math.nan] * len(df)
    for d in deltas:
        lo = df[f"{d} low"] if f"{d} low" in df.columns else nan_col
        hi = df[f"{d} high"] if f"{d} high" in df.columns else nan_col
        out[d[:-2]] = [
            cell(label, a, x, lo_, hi_) for label, a, x, lo_, hi_ in zip(df.index, df[d[:-2]], df[d], lo, hi)
        ]
    return out.drop(columns=deltas + bounds)
