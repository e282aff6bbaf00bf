"""A fine-tuning comparison as resumable units: each (mode, learning rate, seed) trained, scored and saved.

Protocol (:func:`compare_units`; the fairness rationale is :mod:`mathcircuits.finetune.compare`'s), in units that
each train one model, score it and save a :class:`UnitRecord` (``<root>/<unit.key>/unit.json``):

1. ``base``: the untrained model, scored on the validation and test facts and on every generic item.
2. ``sweep``: every trained mode at every rate of its grid, seed 0, for ``sweep_steps`` steps; scored on the
   validation facts and on the first ``sweep_generic`` items of each generic benchmark.
3. choose: per mode the rate with the best mean validation score (answer log-probability or accuracy; ties: the
   smaller rate); :attr:`RateChoice.at_edge` flags a rate at either end of a grid of two or more rates.
4. ``final``: each mode's chosen rate trained ``steps`` steps with each of ``seeds``, scored on the test facts and
   every generic item. ``random`` draws its heads with the unit's seed, so its spread is over draws and training
   seeds together.
5. sensitivity (``kv_sensitivity``): ``precise`` with ``kv_policy="exclusive"`` at precise's chosen rate, same
   seeds, so no non-key head's keys or values change.

A unit whose record exists is read back, not retrained, so the comparison resumes after a kill (a killed unit
leaves no record; its work folder is cleared and it runs again). Units left are logged and kept in
``<root>/progress.json``.
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from mathcircuits._files import write_json
from mathcircuits.finetune.modes import Mode
from mathcircuits.finetune.units import RateChoice, SelectOn, Unit, UnitComparison, UnitPlan, UnitRecord

__all__ = [
    "compare_units",
]

log = logging.getLogger(__name__)


def sweep_units(plan: UnitPlan) -> list[Unit]:
    """The base unit and every (mode, rate) of the sweep, seed 0, in plan order."""
    units = [Unit(Mode("base"), phase="base")]
    for mode in plan.modes:
        units += [
            Unit(Mode.parse(mode), float(lr), 0, "sweep", steps=plan.sweep_steps) for lr in sorted(plan.grids[mode])
        ]
    return units


def final_units(plan: UnitPlan, choices: Mapping[str, RateChoice]) -> list[Unit]:
    """Every mode at its chosen rate with each seed; then the ``kv_policy="exclusive"`` sensitivity runs."""
    units = [
        Unit(Mode.parse(m), choices[m].learning_rate, s, "final", steps=plan.steps)
        for s in plan.seeds
        for m in plan.modes
    ]
    if plan.kv_sensitivity:
        lr = choices["precise"].learning_rate
        units += [Unit(Mode("precise"), lr, s, "final", "exclusive", plan.steps) for s in plan.seeds]
    return units


def _score(record: UnitRecord, select_on: str) -> float:
    scores = record.math.get("validation")
    if scores is None:
        raise ValueError(f"unit {record.unit.key} has no validation scores, so no rate can be chosen on it.")
    return scores.mean_logp if select_on == "logp" else scores.accuracy


def choose_rates(records: Sequence[UnitRecord], select_on: SelectOn = "logp") -> dict[str, RateChoice]:
    """Per mode, the sweep rate with the best mean validation score (ties: the smaller rate); other phases ignored."""
    by_mode: dict[str, list[UnitRecord]] = {}
    for r in records:
        if r.unit.phase == "sweep":
            by_mode.setdefault(str(r.unit.mode), []).append(r)
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

    ``execute`` trains and scores one unit in the given work folder (cleared first) and returns its record; ``echo``
    gets one line per finished unit. The comparison is also saved as ``<root>/comparison.json``.
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
