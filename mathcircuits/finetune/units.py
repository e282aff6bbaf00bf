"""The values of a fine-tuning comparison in units: what one unit is, what it records, the plan, the choices.

A *unit* is one (mode, learning rate, seed), trained, scored and saved as a :class:`UnitRecord`, so a comparison
advances unit by unit and resumes after a kill (:mod:`mathcircuits.finetune.protocol` runs them).

Example::

    cmp = UnitComparison.load("runs/improve-cpu/compare/units/comparison.json")
    cmp.final("precise")                 # the precise units at the chosen rate, one per seed
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Literal

from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits.finetune.layouts import KVPolicy
from mathcircuits.finetune.modes import Mode
from mathcircuits.models import Head

__all__ = [
    "ItemScores",
    "RateChoice",
    "Unit",
    "UnitComparison",
    "UnitPlan",
    "UnitRecord",
]

Phase = Literal["base", "sweep", "final"]
SelectOn = Literal["logp", "accuracy"]


@dataclass(frozen=True)
class Unit:
    """One training run of the comparison: what is tuned, at which rate, with which seed, for how long.

    ``learning_rate`` is NaN and ``steps`` 0 for ``base``; ``seed`` sets data order and LoRA init, and for ``random``
    the heads' draw; ``kv_policy="exclusive"`` marks the sensitivity run.
    """

    mode: Mode
    learning_rate: float = math.nan
    seed: int = 0
    phase: Phase = "final"
    kv_policy: KVPolicy = "group"
    steps: int = 0

    @property
    def label(self) -> str:
        """The mode as tables show it, e.g. ``precise`` or ``precise (kv exclusive)``."""
        return str(self.mode) if self.kv_policy == "group" else f"{self.mode} (kv {self.kv_policy})"

    @property
    def key(self) -> str:
        """The unit's folder under the comparison root, e.g. ``final/precise/lr_0.001/seed_1``."""
        if self.phase == "base":
            return "base"
        mode = str(self.mode).replace("+", "_") + ("" if self.kv_policy == "group" else f"-kv_{self.kv_policy}")
        return f"{self.phase}/{mode}/lr_{self.learning_rate:g}/seed_{self.seed}"


@dataclass(frozen=True)
class ItemScores:
    """Per-item outcomes of one model on one item set: 0/1 ``correct`` and a log-probability ``logp``.

    Math: ``logp`` is the teacher-forced log-probability of the whole answer. Generic (multiple
    choice): ``logp`` is the gold option's log-probability normalised over the options.
    """

    correct: tuple[int, ...]
    logp: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.correct) != len(self.logp):
            raise ValueError(f"ItemScores: {len(self.correct)} outcomes but {len(self.logp)} log-probabilities.")

    @property
    def accuracy(self) -> float:
        return sum(self.correct) / len(self.correct) if self.correct else math.nan

    @property
    def mean_logp(self) -> float:
        return sum(self.logp) / len(self.logp) if self.logp else math.nan


@dataclass(frozen=True, repr=False)
class UnitRecord(SavedResult):
    """What one unit tuned, how training went, what it cost, and its per-item scores.

    ``kv_shared_heads``: non-tuned heads whose keys and values changed through a shared KV group. ``train_cpu_s``
    counts this process, all threads. ``math``: split → scores on its held-out facts; ``generic``: benchmark → scores
    on its first ``n`` items (the same items, in order, for every unit). ``lora_rank`` is 0 except for ``lora``.
    """

    STAGE = "compare"
    VERSION = 1

    unit: Unit
    heads: tuple[Head, ...]
    mlps: tuple[int, ...]
    kv_shared_heads: tuple[Head, ...]
    n_trainable: int
    global_step: int
    train_loss: float
    train_cpu_s: float
    eval_cpu_s: float
    wall_s: float
    math: dict[str, ItemScores] = field(default_factory=dict)
    generic: dict[str, ItemScores] = field(default_factory=dict)
    lora_rank: int = 0

    @property
    def cpu_s(self) -> float:
        return self.train_cpu_s + self.eval_cpu_s

    def summary_items(self) -> list[tuple[str, str]]:
        """The unit, its tuned parameters, math accuracy per split and its CPU time."""
        items = [("unit", self.unit.key), ("tuned params", str(self.n_trainable))]
        items += [(f"math {split}", f"{100 * s.accuracy:.1f}%") for split, s in self.math.items()]
        return items + [("CPU s", f"{self.cpu_s:.0f}")]


@dataclass(frozen=True)
class UnitPlan:
    """The comparison's design (``base`` is always scored; ``random``'s seed ``i`` is draw ``i``).

    ``sweep_generic``: generic items per benchmark a sweep unit scores (0: none); ``kv_sensitivity`` also trains
    ``precise`` with ``kv_policy="exclusive"`` at its chosen rate.
    """

    modes: tuple[str, ...]
    grids: dict[str, tuple[float, ...]]
    sweep_steps: int
    steps: int
    seeds: tuple[int, ...] = (0, 1, 2)
    sweep_generic: int = 0
    kv_sensitivity: bool = False
    select_on: SelectOn = "logp"

    def __post_init__(self) -> None:
        missing = [m for m in self.modes if not self.grids.get(m)]
        if missing:
            raise FixableValueError(f"UnitPlan: modes {missing} have no learning-rate grid. ", "give grids[mode].")
        if any(not lr > 0 for g in self.grids.values() for lr in g):
            raise FixableValueError(
                f"UnitPlan: grids {self.grids} hold a rate that is not positive. ", "positive rates."
            )
        if self.kv_sensitivity and "precise" not in self.modes:
            raise FixableValueError("UnitPlan: kv_sensitivity needs the mode 'precise'. ", "add it or turn it off.")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"UnitPlan: seeds {self.seeds} must be distinct and at least one.")

    @property
    def n_units(self) -> int:
        """Every unit of the comparison: base, the sweep, the final runs and the sensitivity runs."""
        n_final = len(self.modes) + (1 if self.kv_sensitivity else 0)
        return 1 + sum(len(self.grids[m]) for m in self.modes) + n_final * len(self.seeds)


@dataclass(frozen=True)
class RateChoice:
    """The rate a mode's sweep chose, and whether it sits at an edge of the grid (``grid`` ascending, a score each)."""

    mode: str
    learning_rate: float
    grid: tuple[float, ...]
    scores: tuple[float, ...]
    select_on: str

    @property
    def edge(self) -> str:
        """``"largest"`` or ``"smallest"`` when the chosen rate is an end of a grid of ≥ 2 rates, else ``""``."""
        if len(self.grid) < 2:
            return ""
        return "largest" if self.learning_rate == max(self.grid) else (
            "smallest" if self.learning_rate == min(self.grid) else ""
        )  # fmt: skip

    @property
    def at_edge(self) -> bool:
        """The best rate is the grid's largest or smallest: the optimum may lie outside it (widen the grid)."""
        return bool(self.edge)


@dataclass(frozen=True, repr=False)
class UnitComparison(SavedResult):
    """The whole comparison: its plan, every unit's record, and each mode's chosen rate."""

    STAGE = "compare"
    VERSION = 1

    plan: UnitPlan
    records: tuple[UnitRecord, ...]
    choices: dict[str, RateChoice]

    def final(self, label: str) -> tuple[UnitRecord, ...]:
        """The final units of a mode label (``base`` → the base unit; ``precise (kv exclusive)`` → sensitivity)."""
        phase = "base" if label == "base" else "final"
        return tuple(r for r in self.records if r.unit.phase == phase and r.unit.label == label)

    @property
    def labels(self) -> tuple[str, ...]:
        """Every label with final units, base first, in plan order."""
        seen = dict.fromkeys(r.unit.label for r in self.records if r.unit.phase in ("base", "final"))
        return tuple(seen)

    @property
    def cpu_s(self) -> float:
        """CPU seconds of every unit (training and scoring)."""
        return sum(r.cpu_s for r in self.records)

    def _rows(self) -> list[tuple[str, str, int, str]]:
        out = []
        for label in self.labels:
            recs = self.final(label)
            accs = [r.math["test"].accuracy for r in recs if "test" in r.math]
            acc = f"{100 * sum(accs) / len(accs):.1f}%" if accs else "n/a"
            lr = "" if label == "base" else f"{recs[0].unit.learning_rate:g}"
            out.append((label, lr, len(recs), acc))
        return out

    def summary_items(self) -> list[tuple[str, str]]:
        """Units and CPU hours, then per mode its chosen rate, seeds and test math accuracy."""
        items = [("units", str(len(self.records))), ("CPU hours", f"{self.cpu_s / 3600:.2f}")]
        return items + [(label, f"lr {lr or '-'}, {n} seeds, test math {acc}") for label, lr, n, acc in self._rows()]

    def _repr_html_(self) -> str:
        head = "<tr><th>mode</th><th>chosen rate</th><th>seeds</th><th>test math accuracy</th></tr>"
        body = "".join(
            f"<tr><td>{html.escape(label)}</td><td>{lr}</td><td>{n}</td><td>{acc}</td></tr>"
            for label, lr, n, acc in self._rows()
        )
        return f"<table>{head}{body}</table><p>{len(self.records)} units, {self.cpu_s / 3600:.2f} CPU hours</p>"
