"""Facts kept apart by stage: identify, validate, analyze and circuit draw from disjoint (op, a, b)
facts, the run counts them, and a stage never borrows another's facts; control pairs span every template."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest

from mathcircuits.ablation import RandomControl
from mathcircuits.data import GenerationConfig, PairSet, generate_pairs
from mathcircuits.data.facts import facts_of
from mathcircuits.patching import PatchingResult
from mathcircuits.pipeline import ConfigError, RunConfig, run_pipeline, select_pairs
from mathcircuits.pipeline.context import template_spread
from mathcircuits.pipeline.facts import FACT_STAGES, stage_facts, stage_rows, tag_fact_stages
from mathcircuits.pipeline.run import done_summary

from helpers import unchecked

ROOT = Path(__file__).resolve().parents[1]
SHARES = (0.35, 0.35, 0.1, 0.2)


def test_the_declared_partition_is_disjoint_seeded_and_covers_every_operation():
    cfg = GenerationConfig(operations=("add", "sub", "mul", "div"), seed=3)
    parts = stage_facts(cfg, SHARES)
    assert list(parts) == list(FACT_STAGES)
    for a in FACT_STAGES:
        for b in FACT_STAGES:
            assert a == b or not parts[a] & parts[b], (a, b)
        assert {op for op, _, _ in parts[a]} == {"add", "sub", "mul", "div"}  # every stage gets every operation
    assert stage_facts(cfg, SHARES) == parts  # deterministic from the seed
    other = stage_facts(GenerationConfig(operations=("add", "sub", "mul", "div"), seed=4), SHARES)
    assert other["identify"] != parts["identify"]
    assert len(parts["identify"]) == sum(round(0.35 * n) for n in (81, 45, 81, 81))  # 1..9: 45 facts of sub
    with pytest.raises(ValueError, match="shares for the 4 stages.*Fix"):
        stage_facts(cfg, (0.5, 0.5))


def test_a_stage_draws_only_its_own_facts_and_is_capped_at_its_share(tiny_llama, template_sets):
    """Ask for far more pairs than a stage's share holds: it gets its share's rows, none of another stage's."""
    cfg = GenerationConfig(operations=("add", "sub"), template_ids=("add_eq_1", "add_eq_2", "sub_eq_1"),
                           n_per_template=60, seed=0)  # fmt: skip
    parts = stage_facts(cfg, SHARES)
    pairs = tag_fact_stages(generate_pairs(tiny_llama.tokenizer, template_sets, cfg), parts)
    total = 0
    for stage, share in zip(FACT_STAGES, SHARES):
        rows = stage_rows(pairs, stage)
        # each stage gets about its share of every template's draws (a partition seeded like the operand order
        # gave one template's first draws all to one stage)
        for t in set(pairs.template_ids):
            n_t = sum(1 for x in pairs.template_ids if x == t)
            assert abs(sum(1 for x in rows.template_ids if x == t) / n_t - share) < 0.15, (stage, t)
        got = select_pairs(rows, None, 10_000)  # the request exceeds the share: capped, never borrowed
        assert len(got) == len(rows) < len(pairs)
        assert facts_of(got) <= parts[stage]
        assert all(not facts_of(got) & parts[s] for s in FACT_STAGES if s != stage)
        total += len(rows)
    # the shares sum to 1: every pair belongs to one stage, but for rounding (a part is a whole number of facts)
    loose = [t for t in pairs.fact_stages if t == ""]
    assert total + len(loose) == len(pairs) and len(loose) <= 0.02 * len(pairs)
    with pytest.raises(ValueError, match="no fact_stage column.*Fix"):
        stage_rows(PairSet(pairs.dataset.remove_columns("fact_stage")), "identify")
    with unchecked(), pytest.raises(ValueError, match="owns no facts.*Fix"):
        stage_rows(pairs, "report")  # type: ignore[arg-type]
    # generation itself keeps to a part: the circuit stage's own pairs
    own = generate_pairs(tiny_llama.tokenizer, template_sets, cfg, facts=parts["circuit"])
    assert facts_of(own) <= parts["circuit"]


def test_shares_that_overlap_or_leave_a_stage_empty_are_refused_when_the_config_loads():
    with pytest.raises(ConfigError, match="stage_fact_shares.*Fix"):
        RunConfig.from_dict({"data": {"stage_fact_shares": [0.5, 0.5, 0.1, 0.1]}})  # sums past 1: parts would overlap
    with pytest.raises(ConfigError, match="stage_fact_shares.*Fix"):
        RunConfig.from_dict({"data": {"operand_range": [1, 2], "stage_fact_shares": [0.9, 0.05, 0.03, 0.02]}})


def test_template_spread_takes_every_template_before_any_twice():
    ds = PairSet(datasets.Dataset.from_dict({"template_id": ["a"] * 10 + ["b"] * 2 + ["c"] * 5}))
    order = template_spread(ds, seed=1)
    assert sorted(order) == list(range(17))
    first = [ds.template_ids[i] for i in order[:6]]
    assert sorted(first) == ["a", "a", "b", "b", "c", "c"]
    assert [ds.template_ids[i] for i in order[:3]] == ["a", "b", "c"]


@pytest.mark.integration
def test_a_tiny_run_keeps_the_stages_facts_apart_and_says_so(tmp_path):
    cfg = RunConfig.load(ROOT / "configs" / "tiny.yaml")
    out = tmp_path / "run"
    run_pipeline(cfg, out, only=["data", "identify", "validate", "analyze", "circuit"], progress=False)
    data, ident = done_summary(out, "data"), done_summary(out, "identify")
    val, ana, circ = done_summary(out, "validate"), done_summary(out, "analyze"), done_summary(out, "circuit")
    assert data.facts_shared_by_stages == 0 and set(data.facts_by_stage) == set(FACT_STAGES)
    assert "facts (op, a, b) by stage, disjoint" in str(data)
    for s in (ident, val, ana, circ):
        assert s.facts is not None and sum(s.facts.facts.values()) > 0, s
        assert set(s.facts.overlap.values()) == {0}, s.facts
        assert "facts (op, a, b) used" in str(s)
    # measured again here, from the saved outputs: identify's patched facts against validate's and analyze's pairs
    correct = PairSet.load(out / "data" / "pairs_correct")
    patched = {int(i) for op in ident.patched_operations for i in PatchingResult.load(out / "identify" /
               f"patching_{op}.pt").pair_ids}  # fmt: skip
    chose = facts_of(correct.of_pair_ids(patched))
    parts = cfg.data.stage_facts()
    assert chose <= parts["identify"]
    for stage in ("validate", "analyze"):
        assert not facts_of(stage_rows(correct, stage)) & chose
    # the control pairs span every template of the fresh pairs (the first fresh pairs in order would not have to)
    fresh = [select_pairs(stage_rows(correct, "validate"), op, cfg.validation.max_pairs) for op in val.fresh_pairs]
    templates = {t for f in fresh for t in f.template_ids}
    control = RandomControl.load(out / "validate" / "control.pt")
    chosen = correct.of_pair_ids(set(control.pair_ids))
    assert set(chosen.template_ids) == templates and val.control is not None
    assert val.control.templates == len(templates) >= 2
