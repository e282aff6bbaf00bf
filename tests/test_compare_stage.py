"""The ``compare`` stage on a tiny random Llama: sweep, selection, disjoint splits, table with intervals, figures."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pandas as pd
import pytest

from mathcircuits.claims import Verdict, claim_c6
from mathcircuits.evaluation import EvalResult
from mathcircuits.finetune import Mode, SFTComparison
from mathcircuits.pipeline import RunConfig, run_pipeline
from mathcircuits.report import ReportParts, report_html

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.integration
def test_compare_stage_writes_the_table_with_intervals(tmp_path):
    bench = tmp_path / "bench" / "AddSub"
    bench.mkdir(parents=True)
    items = [{"instruction": f"What is {i} + 1?", "input": "", "output": "", "answer": str(i + 1)} for i in range(3)]
    bench.joinpath("test.json").write_text(json.dumps(items))
    cfg = RunConfig.from_dict(
        {
            "model": {"source": "tiny-llama", "threads": 1},
            "data": {"operations": ["add"], "template_ids": ["add_eq_1", "add_eq_2"], "n_per_template": 3,
                     "keep_only_correct": False},
            "patching": {"min_pairs": 1, "max_pairs": 6},
            "selection": {"rule": "topk", "k": 2},
            "finetune": {"enabled": False, "max_steps": 2, "train_pairs_per_template": 4, "batch_size": 2,
                         "micro_batch_size": 2, "save_steps": 0},
            "evaluation": {"enabled": False, "heldout_pairs_per_template": 6, "benchmarks": ["AddSub"], "limit": 3,
                           "n_shot": 0, "max_new_tokens": 4, "root": str(tmp_path / "bench")},
            "compare": {"enabled": True, "modes": ["base", "precise", "precise@1", "random", "lora", "full"],
                        "learning_rates": [1e-3, 1e-2], "validation_pairs": 8},
        }
    )  # fmt: skip
    out = tmp_path / "run"
    summaries = run_pipeline(cfg, out, only=["data", "identify", "compare"], progress=False)
    s = summaries["compare"]
    assert set(s.selected) == {"precise", "precise@1", "random", "lora", "full"}
    val = set(datasets.load_from_disk(str(out / "compare" / "validation_pairs"))["prompt"])
    test = set(datasets.load_from_disk(str(out / "compare" / "test_pairs"))["prompt"])
    train = set(datasets.load_from_disk(str(out / "compare" / "train_pairs"))["prompt"])
    assert val and test and not (val & test) and not (val & train) and not (test & train)
    cmp = SFTComparison.load(out / "compare" / "comparison.json")
    assert len(cmp.runs) == 1 + 5 * 2 and all(r.global_step == 2 for r in cmp.runs if r.mode.kind != "base")
    table = pd.read_csv(out / "compare" / "table.csv").set_index("model")
    assert list(table.index) == ["base", "precise", "precise@1", "random", "lora", "full"]
    for col in ("held-out arithmetic", "AddSub"):
        for suffix in (" low", " high", " Δ", " Δ low", " Δ high"):
            assert table[col + suffix].notna().all(), col + suffix
        assert (table[f"{col} Δ low"] <= table[f"{col} Δ"] + 1e-9).all()
    assert table.loc["precise", "learning rate"] == s.selected["precise"]
    base, full = (EvalResult.load(out / "compare" / f"eval_{m}.json") for m in ("base", "full"))
    assert len(base.item_correct["held-out arithmetic"]) == len(full.item_correct["held-out arithmetic"]) == len(test)
    assert (out / "compare" / "figures" / "sweep.html").exists() and (
        out / "compare" / "figures" / "deltas.html"
    ).exists()
    # the report shows the comparison, and C6 can be read from the compare stage's evaluations
    sweep = pd.read_csv(out / "compare" / "sweep.csv")
    html = report_html(ReportParts(comparison_sweep=sweep, comparison_table=table))
    assert 'id="compare"' in html and "Learning-rate sweep" in html and "precise@1" in html
    fair = {m: EvalResult.load(out / "compare" / f"eval_{m}.json") for m in ("base", "precise", "full")}
    assert claim_c6(fair).verdict != Verdict.NOT_MEASURED


def test_sft_compare_config_loads():
    cfg = RunConfig.load(ROOT / "configs" / "sft-compare.yaml")
    assert cfg.compare.enabled and Mode.parse("lora") in cfg.compare.modes and Mode.parse("random") in cfg.compare.modes
    assert len(cfg.compare.learning_rates) == 4 and cfg.evaluation.limit >= 500
