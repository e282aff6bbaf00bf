"""The ``compare`` stage on a tiny random Llama: fact splits, units, table with intervals, Pareto figure, C6/C6b."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from mathcircuits.claims import ClaimsCard
from mathcircuits.data import PairSet
from mathcircuits.data.facts import facts_of
from mathcircuits.finetune import UnitComparison
from mathcircuits.pipeline import RunConfig, run_pipeline

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.integration
def test_compare_stage_writes_the_table_pareto_and_claims(tmp_path):
    bench = tmp_path / "bench" / "ARC-Easy"
    bench.mkdir(parents=True)
    items = [
        {"instruction": f"Please choose the correct answer to the question: Is {i} small?\n\nAnswer1: yes. "
         f"Answer2: no. Answer3: maybe {i}. Answer4: never.\n\nAnswer format: answer1/answer2/answer3/answer4",
         "input": "", "output": "", "answer": f"answer{1 + i % 4}"}
        for i in range(8)
    ]  # fmt: skip
    bench.joinpath("test.json").write_text(json.dumps(items))
    cfg = RunConfig.from_dict(
        {
            "model": {"source": "tiny-llama", "threads": 1},
            "data": {"operations": ["add"], "template_ids": ["add_eq_1", "add_eq_2"], "n_per_template": 12,
                     "keep_only_correct": False},
            "patching": {"min_pairs": 1, "max_pairs": 6},
            "selection": {"rule": "topk", "k": 2},
            "validation": {"n_random": 1, "max_pairs": 4, "knockout_max_k": 2, "transfer_templates": False,
                           "transfer_multi_digit": False, "word_problem_sets": []},
            "analysis": {"max_pairs": 4, "static_formats": []},
            "finetune": {"enabled": False, "max_steps": 2, "train_pairs_per_template": 6, "batch_size": 4,
                         "micro_batch_size": 4, "operand_range": [1, 9]},
            "evaluation": {"enabled": False, "benchmarks": ["ARC-Easy"], "limit": 6, "root": str(tmp_path / "bench")},
            "compare": {"enabled": True, "modes": ["precise", "random", "full"], "learning_rates": [1e-3],
                        "sparse_learning_rates": [1e-2, 3e-2], "sweep_steps": 1, "seeds": 2, "sweep_generic": 3,
                        "kv_sensitivity": False, "validation_pairs_per_template": 4, "test_pairs_per_template": 6},
        }
    )  # fmt: skip
    out = tmp_path / "run"
    summaries = run_pipeline(cfg, out, progress=False)
    s = summaries["compare"]
    assert set(s.selected) == {"precise", "random", "full"}
    assert "full" not in s.at_edge  # a one-rate grid has no edge
    splits = {k: PairSet.load(out / "compare" / f"{k}_pairs") for k in ("train", "validation", "test")}
    facts = {k: facts_of(v) for k, v in splits.items()}
    assert not facts["train"] & facts["test"] and not facts["validation"] & facts["test"]
    assert not any(p.startswith(("2 + 4", "7 + 1")) for p in splits["test"].prompts)  # bare: no few-shot prefix
    cmp = UnitComparison.load(out / "compare" / "units" / "comparison.json")
    assert len(cmp.records) == cfg.compare.plan(cfg.finetune.max_steps).n_units == 1 + 5 + 3 * 2
    table = pd.read_csv(out / "compare" / "table.csv").set_index("mode")
    assert list(table.index) == ["base", "precise", "random", "full"]
    for col in ("math Δ", "generic Δ"):
        assert table[col + " low"].notna().all() and (table[col + " low"] <= table[col] + 1e-9).all()
    assert table.loc["precise", "kv-shared heads"] == 2 and table.loc["precise", "seeds"] == 2
    pts = pd.read_csv(out / "compare" / "pareto.csv")
    assert len(pts) == len(cmp.records) - 1 and set(pts["phase"]) == {"sweep", "final"}
    assert (out / "compare" / "figures" / "pareto.html").exists() and "MDD" in s.power
    card = ClaimsCard.load(out / "report" / "claims.json")
    ids = [c.id for c in card.claims]  # the paper's claims, C6b after C6, then N1-N3 (beyond the paper)
    assert ids[ids.index("C6") : ids.index("C6") + 2] == ["C6", "C6b"] and ids[-3:] == ["N1", "N2", "N3"]
    assert "precise = the 2 key heads" in card["C6"].measurement
    html = (out / "report" / "report.html").read_text()
    assert 'id="compare"' in html and "Math gain against generic change" in html


def test_sft_compare_and_cpu_preset_configs_load():
    gpu = RunConfig.load(ROOT / "configs" / "sft-compare.yaml")
    cpu = RunConfig.load(ROOT / "configs" / "improve-cpu.yaml")
    for cfg in (gpu, cpu):
        assert cfg.compare.enabled
        assert {"precise", "precise+mlp", "random", "lora", "full"} <= {str(m) for m in cfg.compare.modes}
        assert cfg.compare.seeds >= 3 and max(cfg.compare.sparse_learning_rates) >= 1e-3
    assert cpu.compare.niceness == 19 and cpu.compare.bare_prompts and cpu.model.threads == 1
    assert len(cpu.evaluation.benchmarks) in (2, 3) and gpu.evaluation.limit >= 500
    # the CPU preset decides C6/C6b for the default run's key set: its data and identify settings are the default's
    default = RunConfig.load(ROOT / "configs" / "default.yaml")
    assert (cpu.data, cpu.patching, cpu.selection) == (default.data, default.patching, default.selection)
    assert cpu.compare.seeds >= 5  # C6b's t interval: seeds − 1 degrees of freedom
