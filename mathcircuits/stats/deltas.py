"""Changes against a baseline, per row and metric, each an :class:`Interval`: what fine-tuning and evaluation report.

The saved CSV tables spell each metric ``m`` as six columns, ``m``, ``m low``, ``m high`` (the row's own level,
when given) and ``m Δ``, ``m Δ low``, ``m Δ high`` (its change); only :class:`DeltaTable` spells or parses them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from mathcircuits._errors import FixableValueError
from mathcircuits.stats.interval import Interval

__all__ = [
    "DeltaTable",
    "Extra",
]

#: A plain value of an extra column (tuned parameters, training speed; None where there is none).
Extra = float | int | str | None

_NAN = math.nan


def no_interval(value: float) -> Interval:
    """A value without an interval (NaN bounds), e.g. a change whose items could not be paired."""
    return Interval(value, _NAN, _NAN, 0, method="none")


@dataclass(frozen=True)
class DeltaTable:
    """Per row and metric, the change against ``baseline`` (and optionally the row's level), with intervals.

    Rows are models or modes in table order; every row has the same metrics; NaN bounds mean no interval. ``levels``
    is empty when the table shows changes only; ``extra`` columns follow the metrics (a row they lack shows NaN).
    """

    baseline: str
    changes: dict[str, dict[str, Interval]]
    levels: dict[str, dict[str, Interval]] = field(default_factory=dict)
    extra: dict[str, dict[str, Extra]] = field(default_factory=dict)
    index_name: str = "model"

    def __post_init__(self) -> None:
        if self.baseline not in self.changes:
            raise FixableValueError(
                f"DeltaTable: the baseline {self.baseline!r} is not among the rows {list(self.changes)}. ",
                "give the baseline a row of its own (its changes are 0).",
            )
        metrics = set(self.metrics)
        odd = [r for r, per in self.changes.items() if set(per) != metrics]
        if self.levels:
            odd += [r for r in self.changes if set(self.levels.get(r, {})) != metrics]
        if odd:
            raise FixableValueError(
                f"DeltaTable: rows {sorted(set(odd))} lack some of the metrics {list(self.metrics)}. ",
                "give every row every metric, with a NaN interval where it was not measured.",
            )

    @property
    def rows(self) -> tuple[str, ...]:
        """The rows, in table order (the baseline usually first)."""
        return tuple(self.changes)

    @property
    def metrics(self) -> tuple[str, ...]:
        """The metrics, in column order."""
        return tuple(self.changes[self.baseline])

    @property
    def compared(self) -> tuple[str, ...]:
        """The rows other than the baseline."""
        return tuple(r for r in self.changes if r != self.baseline)

    def change(self, row: str, metric: str) -> Interval:
        """The change of ``row`` against the baseline on ``metric``."""
        return self.changes[row][metric]

    def level(self, row: str, metric: str) -> Interval | None:
        """The row's own value of ``metric`` with its interval (None when the table has no levels)."""
        return self.levels[row][metric] if self.levels else None

    @staticmethod
    def level_columns(metric: str) -> tuple[str, str, str]:
        """The names of a level's columns: ``(m, "m low", "m high")``."""
        return metric, f"{metric} low", f"{metric} high"

    @staticmethod
    def change_columns(metric: str) -> tuple[str, str, str]:
        """The names of a change's columns: ``("m Δ", "m Δ low", "m Δ high")``."""
        return f"{metric} Δ", f"{metric} Δ low", f"{metric} Δ high"

    def to_dataframe(self) -> pd.DataFrame:
        """The table as the stages save it: per metric its level and change columns, then the extras."""
        parts = (
            [(self.levels, self.level_columns), (self.changes, self.change_columns)]
            if self.levels
            else [(self.changes, self.change_columns)]
        )
        cols = [c for m in self.metrics for _, names in parts for c in names(m)]
        rows = {
            r: {c: x for m in self.metrics for ivs, names in parts for c, x in zip(names(m), _triple(ivs[r][m]))}
            for r in self.rows
        }
        df = pd.DataFrame.from_dict(rows, orient="index", columns=cols)
        df.index.name = self.index_name
        for name, values in self.extra.items():
            df[name] = [values.get(r, _NAN) for r in df.index]
        return df

    @classmethod
    def from_dataframe(cls, df: pd.DataFrame, baseline: str | None = None) -> DeltaTable:
        """The table that :meth:`to_dataframe` wrote; its inverse (``baseline`` None: the first row).

        Any column not a metric's is an extra one; the intervals carry ``n=0`` and no method (the columns do not hold
        them).
        """
        cols = [str(c) for c in df.columns]
        metrics = [c[:-2] for c in cols if c.endswith(" Δ") and set(cls.change_columns(c[:-2])) <= set(cols)]
        with_levels = bool(metrics) and all(set(cls.level_columns(m)) <= set(cols) for m in metrics)
        used = {x for m in metrics for x in cls.change_columns(m) + (cls.level_columns(m) if with_levels else ())}

        def iv(row: pd.Series, names: tuple[str, str, str]) -> Interval:
            v, lo, hi = (float(row[x]) if row[x] is not None else _NAN for x in names)
            return Interval(v, lo, hi, 0, method="none")

        rows = [str(r) for r in df.index]
        changes = {r: {m: iv(df.loc[r], cls.change_columns(m)) for m in metrics} for r in rows}
        levels = {r: {m: iv(df.loc[r], cls.level_columns(m)) for m in metrics} for r in rows} if with_levels else {}
        extra = {c: {r: _plain(df.loc[r, c]) for r in rows} for c in cols if c not in used}
        return cls(
            baseline=rows[0] if baseline is None else baseline,
            changes=changes,
            levels=levels,
            extra=extra,
            index_name=str(df.index.name or "model"),
        )

    def __repr__(self) -> str:
        return (
            f"DeltaTable(against {self.baseline!r}: {len(self.rows)} {self.index_name}s × "
            f"{len(self.metrics)} metrics {list(self.metrics)})"
        )

    def _repr_html_(self) -> str:
        return self.to_dataframe().to_html(float_format=lambda v: f"{v:.4g}", na_rep="–")


def _triple(iv: Interval) -> tuple[float, float, float]:
    return iv.value, iv.low, iv.high


def _plain(value: object) -> Extra:
    """A cell as a plain Python value (numpy scalars to int/float; NaN stays a float)."""
    if value is None or isinstance(value, str):
        return value
    if hasattr(value, "item"):
        value = value.item()  # type: ignore[union-attr]
    return value if isinstance(value, (int, float)) else str(value)
