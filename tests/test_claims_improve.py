"""Claims C6 and C6b read from a comparison in units: each rule holds, fails and refuses where it must.

The comparisons are built as real values (per-seed, per-item outcomes of each mode), so each verdict
follows from the numbers; one comparison comes from tiny-llama units whose training cannot move anything.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from mathcircuits.claims import ClaimsCard, Verdict, assess_claims
from mathcircuits.claims.improve import C6Stop, claim_c6_units, claim_c6b, precise_definition, with_unit_claims
from mathcircuits.finetune import (
    ItemScores,
    Mode,
    Unit,
    UnitComparison,
    UnitPlan,
    UnitRecord,
    compare_units,
    effects_table,
    pareto_records,
    sweep_records,
)
from mathcircuits.finetune.effects import pareto_points, sweep_table
from mathcircuits.models import Head

sys.path.insert(0, str(Path(__file__).resolve().parent))

import units_job  # noqa: E402

N = 400


def outcomes(acc: float, seed: int, kind: int) -> tuple[int, ...]:
    """0/1 per item: item ``i`` is right when its difficulty (shared by every model) is below ``acc``, jittered per
    seed, so two models of equal accuracy agree on most items, as trained models do."""
    difficulty = torch.rand(N, generator=torch.Generator().manual_seed(kind))
    jitter = 0.02 * torch.randn(N, generator=torch.Generator().manual_seed(seed))
    return tuple(int(x) for x in (difficulty + jitter < acc).tolist())


def record(mode: str, seed: int, math_acc: float, gen_acc: float, phase: str = "final") -> UnitRecord:
    unit = Unit(
        Mode.parse(mode), float("nan") if mode == "base" else 1e-3, seed, phase, steps=0 if mode == "base" else 8
    )  # type: ignore[arg-type]
    m = outcomes(math_acc, 1000 * seed + 1, kind=1)
    g = outcomes(gen_acc, 1000 * seed + 2, kind=2)
    scores = {"test": ItemScores(m, tuple(float(-3 + 2 * x) for x in m))}
    if phase == "base":
        scores["validation"] = scores["test"]
    heads = (Head(3, 1), Head(4, 2)) if mode in ("precise", "random") else ()
    return UnitRecord(unit, heads, (), (Head(3, 0),) if mode == "precise" else (), 10, 8, 0.5, 1.0, 1.0, 2.0, scores,
                      {"ARC-Easy": ItemScores(g, tuple(float(-1 + x) for x in g))})  # fmt: skip


def comparison(math: dict[str, float], generic: dict[str, float] | None = None) -> UnitComparison:
    generic = generic or {}
    recs = [record("base", 0, math["base"], generic.get("base", 0.5), "base")]
    for mode in (m for m in math if m != "base"):
        # same items for every model: seed 0's draw with a per-seed nudge, as retraining would give
        recs += [record(mode, s, math[mode] + 0.005 * (s - 1), generic.get(mode, 0.5)) for s in range(3)]
    modes = tuple(m for m in math if m != "base")
    plan = UnitPlan(modes=modes, grids={m: (1e-3,) for m in modes}, sweep_steps=1, steps=8)
    return UnitComparison(plan, tuple(recs), {})


def test_c6_holds_fails_and_needs_an_effect():
    holds = claim_c6_units(comparison({"base": 0.2, "precise": 0.6, "full": 0.6}))
    assert holds.verdict == Verdict.HOLDS
    assert holds.estimate.method == "seed_item_t"  # the card names how the interval was drawn
    # the card carries the one definition of "precise", built from the record's counts: 2 key heads, 1 non-key head
    # whose shared K/V changes (the side effect is printed), 10 trainable parameters
    precise = precise_definition(2, 1, 10)
    assert precise in holds.measurement
    # the definition's words are its product, the one place they are written: checked whole, once
    assert precise == (
        "precise = the 2 key heads' q/k/v/o slices only, no MLPs (0k params); their shared K/V also changes 1 non-key "
        "heads"
    )
    worse = claim_c6_units(comparison({"base": 0.2, "precise": 0.3, "full": 0.6}))
    assert worse.verdict == Verdict.FAILS and worse.estimate.high < -0.05
    forgets = comparison({"base": 0.2, "precise": 0.6, "full": 0.6}, {"base": 0.6, "precise": 0.3, "full": 0.6})
    assert claim_c6_units(forgets).verdict == Verdict.FAILS  # generic ability lost
    idle = claim_c6_units(comparison({"base": 0.4, "precise": 0.4, "full": 0.4}))
    assert idle.verdict == Verdict.INCONCLUSIVE  # the old rule: "holds"
    assert idle.measurement.startswith(f"{C6Stop.NO_EFFECT.value}. ")  # the card leads with the stop
    close = claim_c6_units(comparison({"base": 0.2, "precise": 0.56, "full": 0.6}))
    assert close.verdict == Verdict.INCONCLUSIVE and close.estimate.low < -0.05 < close.estimate.high
    assert claim_c6_units(None).verdict == Verdict.NOT_MEASURED
    assert claim_c6_units(comparison({"base": 0.2, "precise": 0.6})).verdict == Verdict.NOT_MEASURED


def test_c6b_holds_fails_and_needs_an_effect():
    beats = claim_c6b(comparison({"base": 0.2, "precise": 0.6, "random": 0.3, "full": 0.6}))
    assert beats.verdict == Verdict.HOLDS and beats.id == "C6b" and "3 draws" in beats.measurement
    assert beats.estimate.method == "seed_item_t"
    same = claim_c6b(comparison({"base": 0.2, "precise": 0.5, "random": 0.62, "full": 0.6}))
    assert same.verdict == Verdict.FAILS and same.estimate.high <= 0  # random heads do as well or better
    idle = claim_c6b(comparison({"base": 0.4, "precise": 0.4, "random": 0.4}))
    assert idle.verdict == Verdict.INCONCLUSIVE and idle.measurement.startswith(f"{C6Stop.NO_EFFECT.value}. ")
    tie = claim_c6b(comparison({"base": 0.2, "precise": 0.5, "random": 0.49}))
    assert tie.verdict == Verdict.INCONCLUSIVE and tie.estimate.low < 0 < tie.estimate.high
    assert claim_c6b(comparison({"base": 0.2, "precise": 0.5})).verdict == Verdict.NOT_MEASURED


def test_card_table_and_pareto_points():
    cmp = comparison({"base": 0.2, "precise": 0.6, "random": 0.3, "full": 0.6}, {"full": 0.4})
    card = with_unit_claims(assess_claims(), cmp)
    assert [c.id for c in card.claims] == ["C1", "C2", "C3", "C4", "C5", "C6", "C6b"]
    assert card["C6"].verdict == Verdict.HOLDS and card["C6b"].verdict == Verdict.HOLDS
    assert ClaimsCard.from_dict(card.to_dict())["C6b"].measurement == card["C6b"].measurement
    table = effects_table(cmp)
    assert list(table.modes) == ["base", "precise", "random", "full"] and table.modes["precise"].seeds == 3
    math_d, changes = table.changes.change("precise", "math"), table.changes
    assert changes.rows == tuple(table.modes) and changes.baseline == "base" and changes.metrics == ("math", "generic")
    assert math_d.low < math_d.value < math_d.high and abs(math_d.value - 40) < 6
    assert changes.change("full", "generic").value < -5 and changes.change("base", "math").value == 0
    assert table.modes["precise"].kv_shared_heads == 1
    df = table.to_dataframe()  # the saved layout (compare/table.csv)
    assert df.loc["precise", "math Δ"] == math_d.value and df.loc["precise", "generic Δ low"] == (
        changes.change("precise", "generic").low
    )
    assert list(df.columns[-8:]) == [
        "math Δ", "math Δ low", "math Δ high", "math logp Δ", "generic Δ", "generic Δ low", "generic Δ high",
        "generic logp Δ",
    ]  # fmt: skip
    pts = pareto_points(cmp)
    assert len(pts) == 9 and pts["chosen"].all() and set(pts["mode"]) == {"precise", "random", "full"}
    records = pareto_records(cmp)  # what the figure reads; the table is made of them, column for field
    assert [p.math_gain for p in records] == pts["math_gain"].tolist() and records[0].mode == pts["mode"].iloc[0]
    assert sweep_records(cmp) == () and list(sweep_table(cmp).columns) == []  # this comparison has no sweep


def test_sweep_and_pareto_figures_read_the_points_and_their_intervals():
    import dataclasses

    from mathcircuits.finetune.protocol import choose_rates
    from mathcircuits.viz import pareto_plot, sft_sweep_curves

    sweep = []
    for lr, acc in ((1e-4, 0.3), (1e-3, 0.7)):
        r = record("precise", 0, acc, 0.5)
        unit = dataclasses.replace(r.unit, learning_rate=lr, phase="sweep")
        sweep.append(dataclasses.replace(r, unit=unit, math={"validation": r.math["test"]}))
    cmp = comparison({"base": 0.2, "precise": 0.6})
    cmp = dataclasses.replace(cmp, records=cmp.records + tuple(sweep), choices=choose_rates(sweep))
    pts = sweep_records(cmp)
    assert [p.learning_rate for p in pts] == [1e-4, 1e-3] and [p.selected for p in pts] == [False, True]
    assert pts[1].accuracy.method == "wilson" and pts[1].accuracy.n == N and pts[1].accuracy.low < pts[1].accuracy.value
    table = sweep_table(cmp)  # the saved layout (compare/sweep.csv)
    assert list(table.columns) == ["mode", "learning_rate", "val_accuracy", "val_logp", "val_n", "selected", "at_edge"]
    assert table.val_accuracy.tolist() == [p.accuracy.value for p in pts] and table.val_n.tolist() == [N, N]
    line = sft_sweep_curves(pts).to_dict()["data"][0]
    assert list(line["error_y"]["arrayminus"]) == pytest.approx(
        [100 * (p.accuracy.value - p.accuracy.low) for p in pts]
    )
    points = pareto_records(cmp)
    dots = pareto_plot(points).to_dict()["data"]
    sweep_dots = next(d for d in dots if d["name"] == "precise (sweep)")
    assert list(sweep_dots["y"]) == [p.math_gain for p in points if p.phase == "sweep"]


@pytest.mark.slow  # trains tiny units end to end (about 7 s of CPU)
def test_c6_on_tiny_units_that_cannot_learn(tmp_path):
    plan, execute = units_job.setup(grids={"precise": (1e-12,), "full": (1e-12,)}, seeds=(0, 1))
    cmp = compare_units(plan, tmp_path, execute)
    c6 = claim_c6_units(cmp)
    # no generic benchmark in these units: C6 cannot hold ("not measured"), and the reason names the missing effect
    assert c6.verdict == Verdict.NOT_MEASURED and C6Stop.NO_EFFECT.value in c6.reason, c6.reason
