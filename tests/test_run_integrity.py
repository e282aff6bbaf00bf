"""A run folder never mixes configurations and never passes damaged outputs as done.

The report test changes the circuit, finetune and compare settings in turn and checks that the report shows only
the current configuration's results; the folder tests damage or edit files and check that the affected stage
and everything below it are reported stale, with the reason, and run again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mathcircuits.cli import main
from mathcircuits.pipeline import RunConfig, RunPaths, run_pipeline
from mathcircuits.pipeline.run import stage_status

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
CIRCUIT = {"enabled": True, "depth": 1, "discovery_pairs": 2, "eval_pairs": 2, "min_pairs": 4, "n_random": 1,
           "n_boot": 10, "points": 2, "completeness_sets": 0}  # fmt: skip


def _cfg(**sections) -> RunConfig:
    d = {k: dict(v) if isinstance(v, dict) else v for k, v in TINY.items()}
    for name, values in sections.items():
        d[name] = {**d.get(name, {}), **values}
    return RunConfig.from_dict(d)


def _report(out: Path) -> str:
    return (out / "report" / "report.html").read_text()


def _claim(out: Path, cid: str) -> dict:
    return next(c for c in json.loads((out / "report" / "claims.json").read_text())["claims"] if c["id"] == cid)


def test_report_shows_only_the_current_configuration(tmp_path):
    out = tmp_path / "run"
    run_pipeline(_cfg(circuit=CIRCUIT), out, progress=False)
    assert '<h2 id="circuit' in _report(out) and list((out / "circuit").glob("circuit_*.json"))
    # circuit off: its old files are gone, and the report (re-run because circuit changed) has no circuit
    run_pipeline(_cfg(circuit={**CIRCUIT, "enabled": False}), out, progress=False)
    assert not list((out / "circuit").glob("circuit_*.json"))
    assert '<h2 id="circuit' not in _report(out)
    # one fine-tuning mode: no full model is left to compare with, and C6 says the full model is missing
    lines: list[str] = []
    run_pipeline(_cfg(finetune={"modes": ["precise"]}), out, progress=False, echo=lines.append)
    assert "[data] up to date, skipped" in lines and "[report] running ..." in " ".join(lines)
    assert not (out / "evaluate" / "eval_full.pt").exists() and not (out / "finetune" / "full").exists()
    assert "full" in _claim(out, "C6")["measurement"].lower() and _claim(out, "C6")["verdict"] == "not measured"
    # back to both modes: the full model is trained again and C6 is measured again
    run_pipeline(_cfg(), out, progress=False)
    c6 = _claim(out, "C6")  # without a generic benchmark C6 stays "not measured", now for that reason alone
    assert (out / "evaluate" / "eval_full.pt").exists()
    assert c6["verdict"] != "not measured" or "generic benchmark" in c6["measurement"] + c6.get("reason", ""), c6


def test_a_damaged_output_makes_its_stage_and_everything_below_stale(tmp_path, capsys):
    out = tmp_path / "run"
    cfg = _cfg()
    run_pipeline(cfg, out, progress=False)
    key = RunPaths(out).key_components
    key.write_text(key.read_text()[:40])  # truncated
    st = stage_status(out, cfg)
    assert st["data"].state == "done"
    assert st["identify"].state == "stale" and "identify/key_components.json changed" in st["identify"].reason
    assert st["validate"].reason == "upstream stage identify is stale" and st["report"].state == "stale"
    assert main(["status", "--out", str(out)]) == 0
    assert "identify   stale (identify/key_components.json changed" in capsys.readouterr().out
    # a single stage below it is refused, naming the damage; nothing is written
    before = (out / "report" / ".done.json").read_text()
    assert main(["report", "--out", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert "needs stage 'data'" not in err and "key_components.json changed" in err and "Fix:" in err
    assert (out / "report" / ".done.json").read_text() == before
    # run re-runs identify and what reads it; data stays
    lines: list[str] = []
    run_pipeline(cfg, out, progress=False, echo=lines.append)
    assert "[data] up to date, skipped" in lines
    assert any(x.startswith("[identify] running ... (identify/key_components.json changed") for x in lines)
    assert json.loads(key.read_text())["heads"]  # whole again
    assert {s.state for s in stage_status(out, cfg).values()} == {"done"}


def test_a_deleted_result_file_is_found(tmp_path):
    out = tmp_path / "run"
    cfg = _cfg()
    run_pipeline(cfg, out, only=["data", "identify", "validate"], progress=False)
    (out / "validate" / "transfer.csv").unlink()
    st = stage_status(out, cfg)
    assert st["validate"].state == "stale" and "validate/transfer.csv is missing" in st["validate"].reason


def test_the_folder_identity_is_not_config_yaml(tmp_path, capsys):
    out = tmp_path / "run"
    tiny = str(ROOT / "configs" / "tiny.yaml")
    assert main(["run", "--config", tiny, "--out", str(out), "--only", "data", "--quiet"]) == 0
    capsys.readouterr()
    cfg_file = out / "config.yaml"
    text = cfg_file.read_text()
    # deleted or emptied: an error, not the default embedded model
    for content in (None, ""):
        if content is None:
            cfg_file.unlink()
        else:
            cfg_file.write_text(content)
        assert main(["run", "--out", str(out), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert ("missing" if content is None else "empty") in err and "Fix: pass --config" in err
    assert not (out / "identify").exists()
    # edited to another model: the guard names the model the folder holds (from .run.json)
    cfg_file.write_text(text.replace("tiny-llama", "tiny-gpt2"))
    assert main(["run", "--out", str(out), "--quiet"]) == 2
    assert "holds a run of model 'tiny-llama'" in capsys.readouterr().err


def test_a_failed_call_leaves_config_yaml_as_it_was(tmp_path, capsys):
    out = tmp_path / "run"
    tiny = ROOT / "configs" / "tiny.yaml"
    assert main(["run", "--config", str(tiny), "--out", str(out), "--only", "data", "--quiet"]) == 0
    before = (out / "config.yaml").read_text()
    other = yaml.safe_load(tiny.read_text())
    other["data"]["n_per_template"] = 3  # data would be stale, so a single identify is refused
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(other))
    assert main(["identify", "--config", str(tmp_path / "other.yaml"), "--out", str(out), "--quiet"]) == 2
    assert "stale" in capsys.readouterr().err
    assert (out / "config.yaml").read_text() == before
    # and a plain run of the folder uses its own (unchanged) config
    assert main(["run", "--out", str(out), "--only", "data", "identify", "--quiet"]) == 0
    assert "[data] up to date, skipped" in capsys.readouterr().out


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_runs_every_stage(tmp_path, dtype):
    out = tmp_path / "run"
    summaries = run_pipeline(_cfg(model={"dtype": dtype}, circuit=CIRCUIT), out, progress=False)
    assert set(summaries) == {"data", "identify", "validate", "analyze", "circuit", "numbers", "finetune", "evaluate",
                              "compare", "report"}  # fmt: skip
    assert (out / "report" / "report.html").exists()


def test_more_pairs_than_exist_is_said_in_the_summary(tmp_path):
    out = tmp_path / "run"
    s = run_pipeline(_cfg(data={"n_per_template": 100, "operand_range": [1, 3]}), out, only=["data"],
                     progress=False)["data"]  # fmt: skip
    assert s.fewer_than_requested and all(n < 100 for n in s.fewer_than_requested.values())
    assert s.requested_per_template == 100
    assert "gave fewer than the 100 pairs asked for" in str(s)  # the printed note is what this test is about


def test_no_random_circuits_is_said_plainly(tmp_path):
    out = tmp_path / "run"
    # the three-shot prefix: on this tiny model's pairs the four-shot one leaves the circuit ill-conditioned, whose
    # summary gives no ratio and so no random band to speak of
    s = run_pipeline(_cfg(data={"fewshot_operations": "neutral"}, circuit={**CIRCUIT, "n_random": 0}), out,
                     only=["data", "circuit"], progress=False)["circuit"]  # fmt: skip
    assert "no random circuits drawn" in str(s) and "0% of" not in str(s)  # the printed words are the product here
