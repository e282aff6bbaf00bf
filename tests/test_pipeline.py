import json
import subprocess
import sys

import pytest

from mathcircuits.pipeline import ConfigError, RunConfig, run_pipeline, stage_status

TINY = {
    "model": {"source": "tiny-llama"},
    "data": {"operations": ["add"], "template_ids": ["add_eq_1", "add_eq_2"], "n_per_template": 3, "keep_only_correct": False},
    "patching": {"min_pairs": 1, "max_pairs": 6},
    "selection": {"rule": "topk", "k": 2},
    "validation": {"knockout_max_k": 1, "n_random": 1, "max_pairs": 4, "transfer_templates": False, "transfer_multi_digit": False, "word_problem_sets": []},
    "analysis": {"max_pairs": 4, "static_formats": []},
    "finetune": {"enabled": False},
    "evaluation": {"enabled": False},
}


def test_config_round_trip_and_errors(tmp_path):
    cfg = RunConfig.from_dict(TINY)
    back = RunConfig.load(cfg.save(tmp_path / "c.yaml"))
    assert back == cfg and back.data.template_ids == ("add_eq_1", "add_eq_2")
    (tmp_path / "c.toml").write_text('[model]\nsource = "tiny-gpt2"\n')
    assert RunConfig.load(tmp_path / "c.toml").model.source == "tiny-gpt2"
    with pytest.raises(ConfigError, match="unknown keys"):
        RunConfig.from_dict({"data": {"n_pairs": 3}})
    with pytest.raises(ConfigError, match="unknown config sections"):
        RunConfig.from_dict({"dataa": {}})
    with pytest.raises(ConfigError, match="must be a number"):
        RunConfig.from_dict({"patching": {"max_pairs": "many"}})


def test_pipeline_runs_skips_and_resumes(tmp_path):
    cfg = RunConfig.from_dict(TINY)
    out = tmp_path / "run"
    run_pipeline(cfg, out, only=["data", "identify"], progress=False)
    assert (out / "identify" / "key_components.json").exists()
    status = stage_status(out, cfg)
    assert status["data"] == status["identify"] == "done" and status["validate"] == "todo"
    marker = (out / "identify" / ".done.json").stat().st_mtime_ns
    lines = []
    run_pipeline(cfg, out, only=["data", "identify", "validate"], progress=False, echo=lines.append)
    assert "[data] up to date, skipped" in lines and "[identify] up to date, skipped" in lines
    assert (out / "identify" / ".done.json").stat().st_mtime_ns == marker
    assert (out / "validate" / "knockout_add.csv").exists()
    run_pipeline(cfg, out, progress=False)  # the remaining stages: analyze, finetune/evaluate (disabled here), report
    html = (out / "report" / "report.html").read_text()
    assert "plotly" in html.lower() and "unpkg.com" not in html
    assert (out / "report" / "figures" / "patching_overall.html").exists()
    # a changed section makes that stage and those after it stale
    changed = RunConfig.from_dict({**TINY, "selection": {"rule": "topk", "k": 3}})
    st = stage_status(out, changed)
    assert st["data"] == "done" and st["identify"] == "stale"
    with pytest.raises(RuntimeError, match="stale"):
        run_pipeline(changed, out, only=["validate"], progress=False)
    assert oct((out / "identify" / "key_components.json").stat().st_mode & 0o044) != "0o0"  # readable by others, not 0600
    assert json.loads((out / "versions.json").read_text())["torch"]


def test_stage_needs_upstream(tmp_path):
    with pytest.raises(RuntimeError, match="needs stage 'data' first"):
        run_pipeline(RunConfig.from_dict(TINY), tmp_path / "r", only=["identify"], progress=False)


def test_cli_help_and_config():
    out = subprocess.run([sys.executable, "-m", "mathcircuits.cli", "--help"], capture_output=True, text=True, check=True).stdout
    assert "identify" in out and "validate" in out
    cfg = subprocess.run([sys.executable, "-m", "mathcircuits.cli", "config", "--show"], capture_output=True, text=True, check=True).stdout
    assert "source: embedded" in cfg and "rule: zscore" in cfg
    bad = subprocess.run([sys.executable, "-m", "mathcircuits.cli", "run", "--config", "/no/such.yaml"], capture_output=True, text=True)
    assert bad.returncode == 2 and "does not exist" in bad.stderr


def test_finetune_and_evaluate_stages(tmp_path):
    import pandas as pd

    bench = tmp_path / "bench" / "AddSub"
    bench.mkdir(parents=True)
    bench.joinpath("test.json").write_text(json.dumps([{"instruction": f"What is {i} + 1?", "input": "", "output": "", "answer": str(i + 1)} for i in range(3)]))
    cfg = RunConfig.from_dict(
        {
            **TINY,
            "finetune": {"enabled": True, "max_steps": 2, "train_pairs_per_template": 2, "micro_batch_size": 2, "batch_size": 2, "save_steps": 0},
            "evaluation": {"enabled": True, "heldout_pairs_per_template": 2, "benchmarks": ["AddSub"], "limit": 2, "n_shot": 0, "max_new_tokens": 4, "root": str(tmp_path / "bench")},
        }
    )
    out = tmp_path / "run"
    summaries = run_pipeline(cfg, out, only=["data", "identify", "finetune", "evaluate"], progress=False)
    runs = summaries["finetune"]["runs"]
    assert set(runs) == {"precise", "full"} and runs["precise"]["steps"] == runs["full"]["steps"] == 2
    assert 0 < runs["precise"]["n_trainable"] < runs["full"]["n_trainable"] == runs["full"]["n_model_params"]
    assert (out / "finetune" / "precise" / "final" / "adapter_config.json").exists()
    train = set(__import__("datasets").load_from_disk(str(out / "finetune" / "train_pairs"))["prompt"])
    held = set(__import__("datasets").load_from_disk(str(out / "finetune" / "heldout_pairs"))["prompt"])
    assert held and not (train & held)
    table = pd.read_csv(out / "evaluate" / "table.csv")
    assert list(table.iloc[:, 0]) == ["base", "precise", "full"]
    assert "held-out arithmetic %" in table.columns and "AddSub" in table.columns
    # new settings: old checkpoints and final weights are discarded, not resumed
    stamp = (out / "finetune" / "precise" / ".settings").read_text()
    lr_changed = RunConfig.from_dict({**TINY, "finetune": {**{"enabled": True, "max_steps": 2, "train_pairs_per_template": 2, "micro_batch_size": 2, "batch_size": 2, "save_steps": 1}, "lr": 1e-3, "modes": ["precise", "precise@3", "precise@3+mlp"]}, "evaluation": {"enabled": False}})
    again = run_pipeline(lr_changed, out, only=["finetune"], progress=False)
    assert again["finetune"]["runs"]["precise"]["steps"] == 2 and again["finetune"]["runs"]["precise"]["resumed_from"] is None
    assert (out / "finetune" / "precise" / ".settings").read_text() != stamp
    runs = again["finetune"]["runs"]
    assert runs["precise@3"]["heads"] == runs["precise@3+mlp"]["heads"] == 3
    assert runs["precise@3"]["n_trainable"] < runs["precise@3+mlp"]["n_trainable"]
    bad = RunConfig.from_dict({**TINY, "finetune": {"enabled": True, "modes": ["precise@many"]}})
    with pytest.raises(ValueError, match="precise@K"):
        run_pipeline(bad, out, only=["finetune"], progress=False)
