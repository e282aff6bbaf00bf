"""A fine-tuning comparison as resumable units: each (mode, learning rate, seed) trained, scored and saved.

Background. Zhang et al. (ICML 2024, §5) compare precise SFT of the key heads with full SFT. A fair
test gives every mode the same data, steps and batch, and each its own learning rate (a sparse
update usually needs a larger step than a dense one); reviewers also expect several training
seeds, a random-heads control (Wang & Veitch 2025) and LoRA on the same parameter budget (LoFiT,
Yin et al. 2024), and a check that a chosen rate is not at the edge of its grid.

Protocol (:func:`compare_units`), in units that each train one model, score it and save a
:class:`UnitRecord` (``<root>/<unit.key>/unit.json``):

1. ``base``: the untrained model, scored on the validation and test facts and on every generic item.
2. ``sweep``: every trained mode at every rate of its grid (:attr:`UnitPlan.grids`), seed 0, for
   ``sweep_steps`` steps; scored on the validation facts and on the first ``sweep_generic`` items of
   each generic benchmark.
3. choose: per mode the rate with the best mean validation score (answer log-probability or
   accuracy, :attr:`UnitPlan.select_on`; ties: the smaller rate); :attr:`RateChoice.at_edge` flags a
   rate at either end of a grid of two or more rates.
4. ``final``: the chosen rate of each mode trained ``steps`` steps with each of ``seeds``, scored on
   the test facts and on every generic item. ``random`` draws its heads with the unit's seed, so
   seed ``i`` is draw ``i``: its spread is over draws and training seeds together.
5. sensitivity (``kv_sensitivity``): ``precise`` with ``kv_policy="exclusive"`` at precise's chosen rate,
   same seeds, so no non-key head's keys or values change.

A unit whose record exists is read back, not retrained, so the comparison resumes after a kill
(a killed unit leaves no record; its work folder is cleared and it runs again). The number of
units left is logged after each unit and kept in ``<root>/progress.json``.

Usage::

    plan = UnitPlan(modes=("precise", "full"), grids={"precise": (1e-3, 3e-3), "full": (1e-5, 1e-4)},
                    sweep_steps=10, steps=40, seeds=(0, 1, 2))
    result = compare_units(plan, "runs/x/compare/units", execute)   # execute: Unit -> UnitRecord
    result.choices["precise"].at_edge
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from mathcircuits._io import SavedResult, write_json
from mathcircuits.finetune.slices import KVPolicy

__all__ = [
    "ItemScores",
    "Phase",
    "RateChoice",
    "SelectOn",
    "Unit",
    "UnitComparison",
    "UnitPlan",
    "UnitRecord",
    "choose_rates",
    "compare_units",
    "final_units",
    "sweep_units",
    "units_remaining",
]

log = logging.getLogger(__name__)

Phase = Literal["base", "sweep", "final"]
SelectOn = Literal["logp", "accuracy"]


@dataclass(frozen=True)
class Unit:
    """One training run of the comparison: what is tuned, at which rate, with which seed, for how long.

    Args:
        mode: ``base``, ``precise``, ``precise+mlp``, ``random``, ``lora`` or ``full``.
        learning_rate: the peak rate (NaN for ``base``).
        seed: the training seed (data order; LoRA init); for ``random`` also the heads' draw.
        phase: ``base``, ``sweep`` or ``final``.
        kv_policy: shared K/V under GQA for the head modes (``"exclusive"``: the sensitivity run).
        steps: optimizer steps (0 for ``base``).
    """

    mode: str
    learning_rate: float = math.nan
    seed: int = 0
    phase: Phase = "final"
    kv_policy: KVPolicy = "group"
    steps: int = 0

    @property
    def label(self) -> str:
        """The mode as tables show it, e.g. ``precise`` or ``precise (kv exclusive)``."""
        return self.mode if self.kv_policy == "group" else f"{self.mode} (kv {self.kv_policy})"

    @property
    def key(self) -> str:
        """The unit's folder under the comparison root, e.g. ``final/precise/lr_0.001/seed_1``."""
        if self.phase == "base":
            return "base"
        mode = self.mode.replace("+", "_") + ("" if self.kv_policy == "group" else f"-kv_{self.kv_policy}")
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


@dataclass(frozen=True)
class UnitRecord(SavedResult):
    """What one unit tuned, how training went, what it cost, and its per-item scores.

    Args:
        unit: the :class:`Unit`.
        heads: the tuned heads (head modes), else empty.
        mlps: the tuned MLPs (``precise+mlp``), else empty.
        kv_shared_heads: non-tuned heads whose keys and values changed through a shared KV group.
        n_trainable: tuned parameters.
        global_step: optimizer steps taken.
        train_loss: mean training loss (NaN for ``base``).
        train_cpu_s: CPU seconds of training (this process, all threads).
        eval_cpu_s: CPU seconds of scoring.
        wall_s: wall-clock seconds of the unit.
        math: split (``validation`` / ``test``) → scores on its held-out arithmetic facts.
        generic: benchmark → scores on the first ``n`` of its items (the same items, in order, for every unit).
        lora_rank: the LoRA rank (``lora`` only, else 0).
    """

    STAGE = "compare"
    VERSION = 1

    unit: Unit
    heads: tuple[tuple[int, int], ...]
    mlps: tuple[int, ...]
    kv_shared_heads: tuple[tuple[int, int], ...]
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


@dataclass(frozen=True)
class UnitPlan:
    """The comparison's design.

    Args:
        modes: trained modes (``base`` is always scored): ``precise``, ``precise+mlp``, ``random``, ``lora``, ``full``.
        grids: mode → its learning-rate grid (the sweep).
        sweep_steps: optimizer steps of a sweep unit.
        steps: optimizer steps of a final unit.
        seeds: training seeds of the final units (``random``: seed ``i`` is draw ``i``).
        sweep_generic: generic items per benchmark scored by a sweep unit (0: none).
        kv_sensitivity: also train ``precise`` with ``kv_policy="exclusive"`` at its chosen rate.
        select_on: the validation score a rate is chosen on: mean answer log-probability or accuracy.
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
            raise ValueError(f"UnitPlan: modes {missing} have no learning-rate grid. Fix: give grids[mode].")
        if any(not lr > 0 for g in self.grids.values() for lr in g):
            raise ValueError(f"UnitPlan: grids {self.grids} hold a rate that is not positive. Fix: positive rates.")
        if self.kv_sensitivity and "precise" not in self.modes:
            raise ValueError("UnitPlan: kv_sensitivity needs the mode 'precise'. Fix: add it or turn it off.")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"UnitPlan: seeds {self.seeds} must be distinct and at least one.")

    @property
    def n_units(self) -> int:
        """Every unit of the comparison: base, the sweep, the final runs and the sensitivity runs."""
        n_final = len(self.modes) + (1 if self.kv_sensitivity else 0)
        return 1 + sum(len(self.grids[m]) for m in self.modes) + n_final * len(self.seeds)


@dataclass(frozen=True)
class RateChoice:
    """The rate a mode's sweep chose, and whether it sits at an edge of the grid.

    Args:
        mode: the mode.
        learning_rate: the chosen rate.
        grid: the rates swept, ascending.
        scores: the validation score of each rate of ``grid``.
        select_on: what the score is (``logp`` or ``accuracy``).
    """

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


@dataclass(frozen=True)
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


def sweep_units(plan: UnitPlan) -> list[Unit]:
    """The base unit and every (mode, rate) of the sweep, seed 0, in plan order."""
    units = [Unit("base", phase="base")]
    for mode in plan.modes:
        units += [Unit(mode, float(lr), 0, "sweep", steps=plan.sweep_steps) for lr in sorted(plan.grids[mode])]
    return units


def final_units(plan: UnitPlan, choices: Mapping[str, RateChoice]) -> list[Unit]:
    """Every mode at its chosen rate with each seed; then the ``kv_policy="exclusive"`` sensitivity runs."""
    units = [Unit(m, choices[m].learning_rate, s, "final", steps=plan.steps) for s in plan.seeds for m in plan.modes]
    if plan.kv_sensitivity:
        lr = choices["precise"].learning_rate
        units += [Unit("precise", lr, s, "final", "exclusive", plan.steps) for s in plan.seeds]
    return units


def _score(record: UnitRecord, select_on: str) -> float:
    scores = record.math.get("validation")
    if scores is None:
        raise ValueError(f"unit {record.unit.key} has no validation scores, so no rate can be chosen on it.")
    return scores.mean_logp if select_on == "logp" else scores.accuracy


def choose_rates(records: Sequence[UnitRecord], select_on: SelectOn = "logp") -> dict[str, RateChoice]:
    """Per mode, the sweep rate with the best mean validation score (ties: the smaller rate).

    Args:
        records: the sweep units' records (other phases are ignored).
        select_on: ``logp`` (mean answer log-probability) or ``accuracy``.

    Returns:
        Mode → :class:`RateChoice`.
    """
    by_mode: dict[str, list[UnitRecord]] = {}
    for r in records:
        if r.unit.phase == "sweep":
            by_mode.setdefault(r.unit.mode, []).append(r)
    out = {}
    for mode, rs in by_mode.items():
        rs = sorted(rs, key=lambda r: r.unit.learning_rate)
        scores = [_score(r, select_on) for r in rs]
        finite = [s for s in scores if not math.isnan(s)]
        best = max(finite) if finite else math.nan
        pick = next((r for r, s in zip(rs, scores) if s == best), rs[0])
        grid = tuple(r.unit.learning_rate for r in rs)
        out[mode] = RateChoice(mode, pick.unit.learning_rate, grid, tuple(scores), select_on)
    return out


def compare_units(
    plan: UnitPlan,
    root: str | Path,
    execute: Callable[[Unit, Path], UnitRecord],
    echo: Callable[[str], None] = log.info,
) -> UnitComparison:
    """Run (or read back) every unit of ``plan``; choose each mode's rate between the sweep and the final runs.

    Args:
        plan: the design.
        root: folder of the units (``<root>/<unit.key>/unit.json``) and ``progress.json``.
        execute: trains and scores one unit in the given work folder (cleared first) and returns its record.
        echo: where one line per finished unit goes (with the number of units left).

    Returns:
        The :class:`UnitComparison` (also saved as ``<root>/comparison.json``).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    total = plan.n_units
    records: list[UnitRecord] = []

    def run(units: list[Unit]) -> None:
        for unit in units:
            path = root / unit.key / "unit.json"
            if path.exists():
                records.append(UnitRecord.load(path))
                continue
            work = root / unit.key / "work"
            shutil.rmtree(work, ignore_errors=True)  # a killed unit's partial training
            t0 = time.perf_counter()
            record = execute(unit, work)
            record.save(path)
            shutil.rmtree(work, ignore_errors=True)
            records.append(record)
            left = total - _n_done(root)
            echo(
                f"unit {unit.key} done in {time.perf_counter() - t0:.0f} s "
                f"({record.cpu_s:.0f} CPU s); {left} of {total} units remain"
            )
            write_json(root / "progress.json", {"done": total - left, "remaining": left, "total": total})

    run(sweep_units(plan))
    choices = choose_rates(records, plan.select_on)
    for c in choices.values():
        if c.at_edge:
            echo(f"warning: {c.mode}'s chosen rate {c.learning_rate:g} is the {c.edge} of its grid {list(c.grid)}")
    run(final_units(plan, choices))
    write_json(root / "progress.json", {"done": total, "remaining": 0, "total": total})
    result = UnitComparison(plan=plan, records=tuple(records), choices=choices)
    result.save(root / "comparison.json")
    return result


def units_remaining(plan: UnitPlan, root: str | Path) -> int:
    """How many units of ``plan`` have no record under ``root`` yet."""
    return plan.n_units - _n_done(Path(root))


def _n_done(root: Path) -> int:
    return sum(1 for _ in root.glob("**/unit.json"))
