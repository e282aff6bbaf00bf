"""What a fine-tuning comparison found: each mode's change against base, with intervals over items and seeds.

Reads a :class:`~mathcircuits.finetune.units.UnitComparison` (values only, no model). A difference
``mean(A) − mean(B)`` gets the seed-and-item ``t`` interval of :func:`mathcircuits.power.seed_item_t` (items
shared, ``t`` with seeds − 1 degrees of freedom: a bootstrap over 3 seeds covers about 0.80 at nominal 0.95).
Generic benchmarks are pooled: every benchmark's items, in name order.

Example::

    table = effects_table(cmp)                      # EffectsTable; .changes: a DeltaTable, .to_dataframe()
    d = difference(cmp, "precise", "full", "math")  # Interval, accuracy difference on test facts
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import pandas as pd
import torch
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.finetune.units import UnitComparison, UnitRecord
from mathcircuits.power import seed_item_t
from mathcircuits.stats import DeltaTable, Interval
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, wilson_interval

__all__ = [
    "EffectsTable",
    "ModeEffects",
    "ParetoPoint",
    "SweepPoint",
    "difference",
    "effects_table",
    "pareto_records",
    "sweep_records",
]

Kind = Literal["math", "generic"]
Metric = Literal["correct", "logp"]


def _row(record: UnitRecord, kind: Kind, metric: Metric, split: str, n: dict[str, int] | None) -> list[float]:
    if kind == "math":
        s = record.math.get(split)
        if s is None:
            raise KeyError(f"unit {record.unit.key} has no {split!r} math scores.")
        return [float(x) for x in getattr(s, metric)]
    out: list[float] = []
    for bench in sorted(n if n is not None else record.generic):
        if bench not in record.generic:
            raise KeyError(f"unit {record.unit.key} lacks the generic benchmark {bench!r}.")
        out += [float(x) for x in getattr(record.generic[bench], metric)[: None if n is None else n[bench]]]
    return out


def _generic_n(records: list[UnitRecord]) -> dict[str, int]:
    benches = set.intersection(*(set(r.generic) for r in records)) if records else set()
    return {b: min(len(r.generic[b].correct) for r in records) for b in benches}


def scores_matrix(
    records: list[UnitRecord] | tuple[UnitRecord, ...],
    kind: Kind,
    metric: Metric = "correct",
    split: str = "test",
    n: dict[str, int] | None = None,
) -> Tensor:
    """Per-seed, per-item scores [seed, item] of some units (one row per unit).

    ``kind="math"`` reads the held-out facts of ``split``; ``"generic"`` every benchmark, pooled. ``n``: benchmark →
    items to use (a prefix); None: as many as every record has.
    """
    records = list(records)
    if not records:
        raise FixableValueError(
            "scores_matrix got no units. ", "pass the final units of a mode (UnitComparison.final)."
        )
    if kind == "generic":
        n = n or _generic_n(records)
        records = [r for r in records if r.generic]
        if not records or not n:
            return torch.zeros(0, 0, dtype=torch.float64)
    return torch.tensor([_row(r, kind, metric, split, n) for r in records], dtype=torch.float64)


def difference(
    cmp: UnitComparison,
    a: str,
    b: str,
    kind: Kind,
    metric: Metric = "correct",
) -> Interval:
    """``mean(a) − mean(b)`` over the final units of two mode labels, with the seed-and-item interval.

    NaN when a side has no scores.
    """
    ra, rb = cmp.final(a), cmp.final(b)
    if not ra or not rb:
        nan = math.nan
        return Interval(nan, nan, nan, 0, method="seed_item_t")
    n = _generic_n([*ra, *rb]) if kind == "generic" else None
    ma, mb = scores_matrix(ra, kind, metric, n=n), scores_matrix(rb, kind, metric, n=n)
    if ma.numel() == 0 or mb.numel() == 0:
        nan = math.nan
        return Interval(nan, nan, nan, 0, method="seed_item_t")
    return seed_item_t(ma, mb)


@dataclass(frozen=True)
class ModeEffects:
    """What one mode label tuned and its other columns of the effects table (its changes are in the
    :class:`EffectsTable`'s ``changes``).

    ``learning_rate`` is NaN for base; ``rate_at_edge`` is ``"largest"``/``"smallest"``/``"no"`` (``""`` without a
    rate choice); accuracies are in percent, log-probability changes in nats per item.
    """

    learning_rate: float
    rate_at_edge: str
    seeds: int
    tuned_params: int
    heads: int
    mlps: int
    kv_shared_heads: int
    math_pct: float
    generic_pct: float
    train_cpu_s: float
    math_logp_change: float
    generic_logp_change: float


@dataclass(frozen=True)
class EffectsTable:
    """Per mode label (base first): what it tuned (``modes``) and its change against base on math and generic
    accuracy, in points with the seed-and-item intervals (``changes``, metrics ``math`` and ``generic``).
    """

    modes: dict[str, ModeEffects]
    changes: DeltaTable

    def to_dataframe(self) -> pd.DataFrame:
        """The saved table (``compare/table.csv``), indexed by mode label; per kind its ``Δ`` columns and ``logp Δ``."""
        rows = []
        for label, m in self.modes.items():
            row: dict[str, object] = {
                "mode": label,
                "learning rate": m.learning_rate,
                "rate at grid edge": m.rate_at_edge,
                "seeds": m.seeds,
                "tuned params": m.tuned_params,
                "heads": m.heads,
                "MLPs": m.mlps,
                "kv-shared heads": m.kv_shared_heads,
                "math %": m.math_pct,
                "generic %": m.generic_pct,
                "train CPU s": m.train_cpu_s,
            }
            for kind, logp in (("math", m.math_logp_change), ("generic", m.generic_logp_change)):
                d = self.changes.change(label, kind)
                row |= dict(zip(DeltaTable.change_columns(kind), (d.value, d.low, d.high)))
                row[f"{kind} logp Δ"] = logp
            rows.append(row)
        return pd.DataFrame(rows).set_index("mode")


def effects_table(cmp: UnitComparison) -> EffectsTable:
    """Per mode label: what it tuned, its chosen rate, and its math and generic change against base.

    The changes are in accuracy points over the final units, with the seed-and-item interval of :func:`difference`.
    """
    modes: dict[str, ModeEffects] = {}
    changes: dict[str, dict[str, Interval]] = {}
    for label in cmp.labels:
        recs = cmp.final(label)
        mode = str(recs[0].unit.mode)
        choice = cmp.choices.get(mode)
        changes[label] = {}
        logp = {}
        for kind in ("math", "generic"):
            d = difference(cmp, label, "base", kind, "correct")  # type: ignore[arg-type]
            changes[label][kind] = Interval(100 * d.value, 100 * d.low, 100 * d.high, d.n, d.confidence, d.method)
            logp[kind] = difference(cmp, label, "base", kind, "logp").value  # type: ignore[arg-type]
        modes[label] = ModeEffects(
            learning_rate=recs[0].unit.learning_rate,
            rate_at_edge=(choice.edge or "no") if choice is not None else "",
            seeds=len(recs),
            tuned_params=recs[0].n_trainable,
            heads=len(recs[0].heads),
            mlps=len(recs[0].mlps),
            kv_shared_heads=len(recs[0].kv_shared_heads),
            math_pct=100 * float(scores_matrix(recs, "math").mean()),
            generic_pct=_mean_pct(recs),
            train_cpu_s=sum(r.train_cpu_s for r in recs) / len(recs),
            math_logp_change=logp["math"],
            generic_logp_change=logp["generic"],
        )
    return EffectsTable(modes, DeltaTable("base", changes, index_name="mode"))


def _mean_pct(recs: tuple[UnitRecord, ...]) -> float:
    m = scores_matrix(recs, "generic")
    return 100 * float(m.mean()) if m.numel() else math.nan


@dataclass(frozen=True)
class ParetoPoint:
    """One trained unit's math gain and generic change against base, in points, on the items it was scored on.

    ``math_split``: validation (sweep units) or test (final units); ``generic_change`` is NaN without generic
    scores; ``chosen`` marks a final unit (at its mode's chosen rate).
    """

    mode: str
    phase: str
    learning_rate: float
    seed: int
    math_split: str
    math_gain: float
    generic_change: float
    math_logp_gain: float
    chosen: bool

    @staticmethod
    def frame(points: Sequence[ParetoPoint]) -> pd.DataFrame:
        """One row per point, one column per field (empty without points)."""
        return pd.DataFrame([asdict(p) for p in points])


@dataclass(frozen=True)
class SweepPoint:
    """One sweep unit: its validation accuracy (with its Wilson interval over the validation items) and mean
    log-probability, whether its rate is the mode's choice, and at which edge of the grid that choice is
    (``"largest"``, ``"smallest"``, or ``""`` inside it)."""

    mode: str
    learning_rate: float
    accuracy: Interval
    logp: float
    selected: bool
    edge: str

    @staticmethod
    def frame(points: Sequence[SweepPoint]) -> pd.DataFrame:
        """The sweep table: ``mode``, ``learning_rate``, ``val_accuracy``, ``val_logp``, ``val_n``, ``selected``,
        ``at_edge``."""
        return pd.DataFrame(
            [
                {
                    "mode": p.mode,
                    "learning_rate": p.learning_rate,
                    "val_accuracy": p.accuracy.value,
                    "val_logp": p.logp,
                    "val_n": p.accuracy.n,
                    "selected": p.selected,
                    "at_edge": p.edge,
                }
                for p in points
            ]
        )


def pareto_records(cmp: UnitComparison) -> tuple[ParetoPoint, ...]:
    """One :class:`ParetoPoint` per trained unit (none without a base unit).

    Sweep units are scored on the validation facts and the first items of each generic benchmark, final units on the
    test facts and every generic item; each is compared with base on the same items.
    """
    base = cmp.final("base")
    if not base:
        return ()
    b = base[0]
    points = []
    for r in cmp.records:
        if r.unit.phase == "base":
            continue
        split = "validation" if r.unit.phase == "sweep" else "test"
        gain = r.math[split].accuracy - b.math[split].accuracy
        lp = r.math[split].mean_logp - b.math[split].mean_logp
        gen = math.nan
        if r.generic and b.generic:
            n = _generic_n([r, b])
            gen = float(scores_matrix([r], "generic", n=n).mean() - scores_matrix([b], "generic", n=n).mean())
        points.append(
            ParetoPoint(
                mode=r.unit.label,
                phase=r.unit.phase,
                learning_rate=r.unit.learning_rate,
                seed=r.unit.seed,
                math_split=split,
                math_gain=100 * gain,
                generic_change=100 * gen,
                math_logp_gain=lp,
                chosen=r.unit.phase == "final",
            )
        )
    return tuple(points)


def pareto_points(cmp: UnitComparison) -> pd.DataFrame:
    """:func:`pareto_records` as a table, one row per trained unit."""
    return ParetoPoint.frame(pareto_records(cmp))


def sweep_records(cmp: UnitComparison, confidence: float = DEFAULT_CONFIDENCE) -> tuple[SweepPoint, ...]:
    """One :class:`SweepPoint` per sweep unit; the accuracy's Wilson interval is at ``confidence``."""
    points = []
    for r in cmp.records:
        if r.unit.phase != "sweep":
            continue
        val, choice = r.math["validation"], cmp.choices[str(r.unit.mode)]
        n = len(val.correct)
        w = wilson_interval(round(val.accuracy * n), n, confidence)
        points.append(
            SweepPoint(
                mode=str(r.unit.mode),
                learning_rate=r.unit.learning_rate,
                accuracy=Interval(val.accuracy, w.low, w.high, n, confidence, "wilson"),
                logp=val.mean_logp,
                selected=choice.learning_rate == r.unit.learning_rate,
                edge=choice.edge,
            )
        )
    return tuple(points)


def sweep_table(cmp: UnitComparison) -> pd.DataFrame:
    """:func:`sweep_records` as a table: ``mode``, ``learning_rate``, ``val_accuracy``, ``val_logp``, ``val_n``,
    ``selected`` (the mode's chosen rate) and ``at_edge`` (whether that choice is at its grid's edge).
    """
    return SweepPoint.frame(sweep_records(cmp))
