"""A run folder survives failures, interrupts and a second process, and a resumed run equals an uninterrupted one.

Runs ``configs/tiny.yaml`` (tiny-llama, every stage) once as the reference; the
other runs are compared with it value by value.
"""

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from safetensors.torch import load_file

from mathcircuits.ablation import KnockoutResult
from mathcircuits.cli import main
from mathcircuits.patching import PatchingResult
from mathcircuits.pipeline import RunConfig, RunFolderError, RunLockedError, run_pipeline, stages
from mathcircuits.pipeline.run import check_run_folder, done_summary, stage_status

pytestmark = pytest.mark.integration  # whole pipeline runs, the CLI in a subprocess, a lock held by another process

ROOT = Path(__file__).resolve().parents[1]
TINY_YAML = ROOT / "configs" / "tiny.yaml"

STAGES = stages()


def _cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference") / "run"
    run_pipeline(RunConfig.load(TINY_YAML), out, progress=False)
    return out


def _assert_same_outputs(a: Path, b: Path) -> None:
    """Every numeric output of two runs of the tiny config is equal (timings aside)."""
    for csv in (
        "data/accuracy.csv",
        "identify/effects_all.csv",
        "validate/knockout_add.csv",
        "validate/transfer.csv",
        "analyze/attention_by_role.csv",
        "analyze/mlp_probes.csv",
    ):
        pd.testing.assert_frame_equal(pd.read_csv(a / csv), pd.read_csv(b / csv), check_exact=True, obj=csv)
    for pt, cls in (
        ("identify/patching_all.pt", PatchingResult),
        ("validate/knockout_add.pt", KnockoutResult),  # the tiny config leaves sub no fresh pairs after identify
    ):
        fa, fb = (cls.load(r / pt).to_dict() for r in (a, b))
        for k, v in fa.items():
            if isinstance(v, torch.Tensor):
                assert torch.equal(v, fb[k]), f"{pt}:{k}"
    ka, kb = (json.loads((r / "identify" / "key_components.json").read_text()) for r in (a, b))
    assert (ka["heads"], ka["head_scores"], ka["mlps"]) == (kb["heads"], kb["head_scores"], kb["mlps"])
    for mode, weights in (("precise", "adapter_model.safetensors"), ("full", "model.safetensors")):
        ra, rb = (json.loads((r / "finetune" / mode / "sft_result.json").read_text()) for r in (a, b))
        assert ra["loss_history"] == rb["loss_history"] and ra["global_step"] == rb["global_step"] == 2
        wa, wb = (load_file(r / "finetune" / mode / "final" / weights) for r in (a, b))
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), mode
    ta, tb = (pd.read_csv(r / "evaluate" / "table.csv") for r in (a, b))
    cols = [c for c in ta.columns if "samples/s" not in c]
    pd.testing.assert_frame_equal(ta[cols], tb[cols])


def test_reference_run_is_complete_and_clean(reference):
    assert {s.state for s in stage_status(reference, RunConfig.load(TINY_YAML)).values()} == {"done"}
    assert not list(reference.rglob("cache-*.arrow")), "datasets cache files left in the run folder"
    assert not (reference / ".lock").exists()
    # held-out arithmetic per model (no benchmarks in the tiny config), and the table
    written = sorted(p.name for p in (reference / "evaluate").iterdir() if p.name != ".done.json")
    assert written == ["eval_base.pt", "eval_full.pt", "eval_precise.pt", "table.csv"]
    for name, stage in STAGES.items():  # every marker holds that stage's typed summary, which round-trips
        summary = done_summary(reference, name)
        assert type(summary) is stage.summary and summary.seconds >= 0 and str(summary).strip()
        assert stage.summary.from_dict(json.loads(json.dumps(summary.to_dict()))) == summary


def test_interrupted_run_resumes_to_the_outputs_of_an_uninterrupted_one(reference, tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mathcircuits.cli", "run", "--config", str(TINY_YAML), "--out", str(out), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # a shell that starts pytest in the background ignores SIGINT, and children inherit that: give Ctrl-C back
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    for line in proc.stdout:
        if line.startswith("[validate] running"):
            proc.send_signal(signal.SIGINT)
            break
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "interrupted; rerun to resume" and "Traceback" not in err
    assert not (out / ".lock").exists() and not (out / "validate" / ".done.json").exists()
    assert (out / "identify" / ".done.json").exists()
    code, printed, _ = _cli("run", "--out", str(out), "--quiet")  # the folder's own config.yaml
    assert code == 0 and "[identify] up to date, skipped" in printed and "[validate] resuming ..." in printed
    assert "== finetune" in printed and "precise          heads=3" in printed  # typed summaries print themselves
    _assert_same_outputs(reference, out)


def test_finetune_resume_never_trains_past_max_steps(reference, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    for mode in ("precise", "full"):  # as if killed after the last checkpoint, before final/ was written
        shutil.rmtree(out / "finetune" / mode / "final")
        with open(out / "finetune" / mode / "log.jsonl", "a") as f:
            f.write(json.dumps({"step": 7, "loss": 9.9}) + "\n" + '{"step": 8, "lo')  # a killed run's lines
    marker = out / "finetune" / ".done.json"  # a killed stage left its running fingerprint, and no marker
    (out / "finetune" / ".running.json").write_text(
        json.dumps({"fingerprint": json.loads(marker.read_text())["fingerprint"]})
    )
    marker.unlink()
    runs = run_pipeline(RunConfig.load(TINY_YAML), out, only=["finetune"], progress=False)["finetune"].runs
    ref = done_summary(reference, "finetune").runs
    for mode in ("precise", "full"):
        assert runs[mode].steps == 2 and runs[mode].resumed_from.endswith("checkpoint-2"), runs[mode]
        assert runs[mode].train_loss == ref[mode].train_loss  # every step's loss, not only the logged ones
        steps = [json.loads(line)["step"] for line in (out / "finetune" / mode / "log.jsonl").read_text().splitlines()]
        assert steps and max(steps) <= 2, steps
    _assert_same_outputs(reference, out)


def test_lock_names_a_live_holder_and_is_taken_over_from_a_dead_one(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / ".lock").write_text(f"{holder.pid}\n")
        with pytest.raises(RunLockedError, match=f"in use by process {holder.pid}"):
            run_pipeline(RunConfig.load(TINY_YAML), out, only=["data"], progress=False)
        code, _, err = _cli("run", "--config", str(TINY_YAML), "--out", str(out))
        assert code == 2 and f"error: run folder {out} is in use by process {holder.pid}" in err and "Fix:" in err
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing written
    finally:
        holder.kill()
        holder.wait()
    # the holder died without releasing: a failing stage (a library error) takes the lock over, and releases it
    bad = yaml.safe_load(TINY_YAML.read_text())
    bad["patching"]["min_pairs"] = 1000
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    code, _, err = _cli("run", "--config", str(tmp_path / "bad.yaml"), "--out", str(out), "--only", "data", "identify")
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: no operation has at least 1000 correct pairs")
    assert "Fix: raise data.n_per_template" in err and not (out / ".lock").exists()
    # ... and the folder still accepts a correct run
    code, printed, _ = _cli("run", "--config", str(TINY_YAML), "--out", str(out), "--only", "data", "identify")
    assert code == 0 and "[data] up to date, skipped" in printed and "[identify] running ..." in printed


def test_a_failed_run_does_not_block_its_folder(tmp_path):
    out = tmp_path / "o7"
    bad = yaml.safe_load(TINY_YAML.read_text())
    bad["model"]["source"] = "/nonexistent/model"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    code, _, err = _cli("run", "--config", str(tmp_path / "bad.yaml"), "--out", str(out))
    assert code == 2 and "/nonexistent/model" in err and not out.exists()
    # a folder an older version left after such a failure (config.yaml of another model, no finished stage)
    out.mkdir()
    (out / "config.yaml").write_text(yaml.safe_dump({"model": {"source": "tiny-gpt2"}}))
    check_run_folder(out, RunConfig.load(TINY_YAML))  # accepted
    # a *finished* run of another model is still protected
    (out / "data").mkdir()
    (out / "data" / ".done.json").write_text(json.dumps({"fingerprint": "x", "summary": {}}))
    with pytest.raises(RunFolderError, match="holds a run of model 'tiny-gpt2'.*Fix: use another --out"):
        check_run_folder(out, RunConfig.load(TINY_YAML))
    check_run_folder(out, RunConfig.load(TINY_YAML), force=True)
