"""The device check (scripts/gpu-check.sh) runs here as its CPU dry run: the same rows on tiny shapes, labelled by them.

What could be false: a stage's public call that the check makes no longer exists or fails; a row is missing from
the table; the JSON lacks a column the device run's reader expects; the float32 exact scan disagrees with the
reference method; the floor is not its stated arithmetic (≈ 0.017 s per pair for Llama-2-7B at 2.5 positions).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import script_module

ROOT = Path(__file__).resolve().parent.parent


def _module():
    return script_module("gpu_check")


def test_the_floor_is_the_issues_arithmetic():
    gc = _module()
    shape = gc.SHAPES["llama2-7b"]["device"]
    assert gc.mlp_rows(shape["layers"], shape["heads"]) == 17_392  # 32·528 + 496
    assert gc.floor_per_pair(shape, 2.5, "bfloat16") == pytest.approx(0.0168, abs=2e-4)
    assert gc.floor_per_pair(shape, 2.5, "float32") > 10 * gc.floor_per_pair(shape, 2.5, "bfloat16")


@pytest.mark.integration
def test_the_dry_run_runs_every_row_and_writes_the_table(tmp_path):
    out = tmp_path / "gpu-check.json"
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    env.pop("OUT", None)
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--dry-run", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    gc = _module()
    assert doc["dry_run"] is True and doc["columns"] == list(gc.COLUMNS) and doc["failed"] == 0
    rows = doc["rows"]
    assert all(set(r) == set(gc.COLUMNS) for r in rows)
    bad = [(r["stage"], r["shape"], r["dtype"], r["error"]) for r in rows if r["status"] != "ok"
           and r["note"] != "dry run: the same code as a row above"]  # fmt: skip
    assert not bad, bad
    stages = {r["stage"] for r in rows}
    for stage in ("exact scan", "reference scan", "attribution scan", "knockout + random ctl", "circuit + faithfulness",
                  "attention + MLP probes", "numbers: states+probes", "SFT precise", "SFT lora", "SFT full",
                  "generation", "mathcircuits run tiny"):  # fmt: skip
        assert stage in stages, stage
    tiny = {gc.shape_label(n, s["dry"], dry=True) for n, s in gc.SHAPES.items()}  # the sizes that really ran
    assert {r["shape"] for r in rows} == tiny | {"tiny-llama"} and not any("llama2-7b" in s for s in tiny)
    for r in rows:
        if r["stage"] == "exact scan":  # a GPU's floor means nothing for a CPU's tiny shapes: not shown
            assert r["per_pair_s"] > 0 and r["floor_per_pair_s"] is None and "floor" not in (r["note"] or "")
            if r["dtype"] == "bfloat16":  # its float32 twin ran: the agreement is a number
                assert math.isfinite(r["agree_fp32"])
        if r["stage"] == "reference scan" and r["dtype"] == "float32":
            assert r["agree_ref"] < 1e-3, r  # exact = reference up to float32 rounding (measured ~5e-5)
        if r["status"] == "ok":
            assert r["seconds"] >= 0 and r["peak_gb"] is not None
    assert "device check on cpu" in proc.stdout and "stage" in proc.stdout  # the printed table
