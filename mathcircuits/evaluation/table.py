"""Evaluation results and the comparison table (Zhang et al., ICML 2024, Table 1).

Every accuracy gets a Wilson interval (``k/n``); every change against the base model a paired-bootstrap
interval (Koehn 2004) over the items both models were scored on, so item difficulty cancels. Per-kind
averages get a stratified bootstrap: each benchmark's items are resampled on their own, with the same draw
for both models of a difference.

Usage::

    table = compare_table({"base": base, "precise SFT": tuned}, baseline_label="base")
    table.change("precise SFT", "SVAMP")    # Interval: accuracy points against base
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch
from torch import Tensor

from mathcircuits._io import SavedResult
from mathcircuits.evaluation.scoring import BenchmarkScore, ScoreSettings
from mathcircuits.stats import DeltaTable, Extra, Interval, Uncertainty
from mathcircuits.stats.bootstrap import bootstrap_indices, paired_bootstrap
from mathcircuits.stats.deltas import no_interval
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, DEFAULT_UNCERTAINTY, wilson_interval

__all__ = [
    "EvalResult",
    "compare_table",
    "format_table",
]

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

    ``kinds[benchmark]`` is "math" or "choice" (for the per-kind averages); ``item_correct[benchmark]`` is the 0/1
    outcome per item, in the benchmark's item order (the same for every model scored with the same settings, so
    differences can be paired). Files of version 2 load with an empty ``item_correct``.
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
        """The Wilson interval of one benchmark's accuracy (an :class:`~mathcircuits.stats.Interval`)."""
        n = self.n[benchmark]
        return wilson_interval(round(self.accuracy[benchmark] * n), n, confidence)

    @classmethod
    def from_scores(
        cls, label: str, scores: Sequence[BenchmarkScore], settings: EvalSettings | None = None
    ) -> EvalResult:
        """Collect :class:`~mathcircuits.evaluation.BenchmarkScore` values into one result.

        Each score's own settings are added per benchmark to ``settings``.
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
            kind: "math", "choice" or "arithmetic".
            correct: one 0/1 outcome per item.
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

    Each benchmark is resampled on its own (seed offset by its position), so it keeps its weight and two models
    get the same draw for the same ``seed``.
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
    extra_columns: Mapping[str, Mapping[str, Extra]] | None = None,
    percent: bool = True,
    averages: bool = True,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> DeltaTable:
    """A Table-1-style comparison: per model, accuracies and their change against a baseline, with intervals.

    A change has NaN bounds when either result lacks per-item outcomes or their item counts differ; per-kind
    averages (``"math avg"``, ``"choice avg"``) are NaN when a row lacks a benchmark. ``.to_dataframe()`` gives
    the saved table (``b``, ``b low``, ``b high``, ``b Δ``, ...).

    Args:
        baseline_label: the row the deltas are taken against (shown first).
        extra_columns: column name → {label → value}, e.g. train samples/s, tuned parameters.
        uncertainty: one seed for every row, so the draws are paired.
    """

    if baseline_label not in results:
        raise KeyError(
            f"baseline {baseline_label!r} is not among the results {list(results)}; pass one of those labels."
        )
    for name, values in (extra_columns or {}).items():
        unknown = set(values) - set(results)
        if unknown:
            raise KeyError(
                f"extra column {name!r} has labels {sorted(unknown)} that are not results; "
                f"use labels from {list(results)}."
            )
    if benchmarks is None:
        benchmarks = list(dict.fromkeys(b for r in results.values() for b in r.accuracy))
    scale = 100.0 if percent else 1.0
    nan = math.nan
    base = results[baseline_label]
    kinds: dict[str, str] = {}
    for r in results.values():
        kinds.update(r.kinds)
    confidence, seed = uncertainty.confidence, uncertainty.seed

    def items(r: EvalResult, b: str) -> Tensor | None:
        xs = r.item_correct.get(b)
        return torch.tensor(xs, dtype=torch.float64) if xs else None

    ordered = [baseline_label] + [label for label in results if label != baseline_label]
    levels: dict[str, dict[str, Interval]] = {label: {} for label in ordered}
    changes: dict[str, dict[str, Interval]] = {label: {} for label in ordered}
    for label in ordered:
        r = results[label]
        for b in benchmarks:
            if b in r.accuracy:
                iv = r.interval(b, confidence)
                level = Interval(r.accuracy[b] * scale, iv.low * scale, iv.high * scale, iv.n, confidence, "wilson")
            else:
                level = no_interval(nan)
            levels[label][b] = level
            delta = level.value - base.accuracy.get(b, nan) * scale
            a, ref = items(r, b), items(base, b)
            if a is not None and ref is not None and a.shape == ref.shape:
                d = paired_bootstrap(a, ref, uncertainty)
                changes[label][b] = Interval(delta, d.low * scale, d.high * scale, d.n, confidence, d.method, seed)
            else:
                changes[label][b] = no_interval(delta)
    if averages:
        for kind in sorted({kinds[b] for b in benchmarks if b in kinds}):
            members = [b for b in benchmarks if kinds.get(b) == kind]
            name = f"{kind} avg"
            ref_items = {b: items(base, b) for b in members}
            base_mean = sum(levels[baseline_label][b].value for b in members) / len(members)
            for label in ordered:
                r = results[label]
                mean = sum(levels[label][b].value for b in members) / len(members)  # NaN if any is missing
                levels[label][name], changes[label][name] = no_interval(mean), no_interval(mean - base_mean)
                mine = {b: items(r, b) for b in members}
                if any(x is None for x in mine.values()):
                    continue
                n = sum(x.shape[0] for x in mine.values())  # type: ignore[union-attr]
                _, boots = _stratified_means(mine, uncertainty)  # type: ignore[arg-type]
                lo, hi = _quantile_pair(boots, confidence)
                levels[label][name] = Interval(mean, lo * scale, hi * scale, n, confidence, "bootstrap", seed)
                if all(ref_items[b] is not None and ref_items[b].shape == mine[b].shape for b in members):
                    diff = {b: mine[b] - ref_items[b] for b in members}  # type: ignore[operator]
                    _, dboots = _stratified_means(diff, uncertainty)
                    lo, hi = _quantile_pair(dboots, confidence)
                    changes[label][name] = Interval(
                        mean - base_mean, lo * scale, hi * scale, n, confidence, "paired_bootstrap", seed
                    )
    extra = {name: dict(values) for name, values in (extra_columns or {}).items()}
    return DeltaTable(baseline_label, changes, levels, extra, index_name="model")


def format_table(table: DeltaTable, decimals: int = 1) -> pd.DataFrame:
    """Paper-style strings: ``"45.6 (+2.3 [+0.4, +4.1])"``, each change and its interval folded into its level's cell.

    The baseline row shows levels only, missing values "–", a change without an interval ``"(+2.3)"``.
    """
    f = f"{{:+.{decimals}f}}"

    def cell(row: str, metric: str) -> str:
        level, d = table.level(row, metric), table.change(row, metric)
        acc = math.nan if level is None else level.value
        if math.isnan(acc):
            return "–"
        if row == table.baseline or math.isnan(d.value):
            return f"{acc:.{decimals}f}"
        ci = "" if math.isnan(d.low) or math.isnan(d.high) else f" [{f.format(d.low)}, {f.format(d.high)}]"
        return f"{acc:.{decimals}f} ({f.format(d.value)}{ci})"

    out = pd.DataFrame({m: [cell(r, m) for r in table.rows] for m in table.metrics}, index=list(table.rows))
    out.index.name = table.index_name
    extra = table.to_dataframe()[list(table.extra)]
    return pd.concat([out, extra], axis=1) if table.extra else out
