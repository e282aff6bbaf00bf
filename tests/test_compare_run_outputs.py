"""scripts/compare_run_outputs.py: two run folders compared value by value (the refactor check)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from helpers import script_module


def _script():
    return script_module("compare_run_outputs")


def _run(folder: Path, effect: float, seconds: float, extra: bool = False) -> Path:
    (folder / "identify").mkdir(parents=True)
    torch.save({"__kind__": "mathcircuits.X", "head_effects": torch.tensor([[0.5, effect]])}, folder / "identify/p.pt")
    summary = {"seconds": seconds, "n_pairs": 8, "report": str(folder / "report/report.html")}
    (folder / "identify/.done.json").write_text(json.dumps({"summary": summary, "fingerprint": str(seconds)}))
    (folder / "identify/table.csv").write_text(f"head,effect,train samples/s\nL0.H1,{effect},{seconds}\n")
    (folder / "identify/fig.html").write_text(f"<div id='{seconds}'></div>")  # figures are not compared
    if extra:
        (folder / "identify/new.json").write_text("{}")
    return folder


def test_equal_runs_compare_equal_and_times_paths_and_figures_are_left_out(tmp_path):
    mod = _script()
    a, b = _run(tmp_path / "a", -0.25, 1.0), _run(tmp_path / "b", -0.25, 2.0)
    compared, skipped, out = mod.compare(a, b)
    assert out == [] and sorted(compared) == ["identify/.done.json", "identify/p.pt", "identify/table.csv"]
    assert skipped == ["identify/fig.html"]


def test_a_changed_value_or_file_is_found(tmp_path):
    mod = _script()
    a, b = _run(tmp_path / "a", -0.25, 1.0), _run(tmp_path / "b", -0.2501, 1.0, extra=True)
    _, _, out = mod.compare(a, b)
    assert any(line.startswith("identify/p.pt.head_effects: tensors differ by up to 0.0001") for line in out), out
    assert "identify/table.csv[0].effect: -0.25 vs -0.2501" in out and "identify/new.json: only in after" in out
    assert mod.compare(a, b, atol=1e-3)[2] == ["identify/new.json: only in after"]  # within the tolerance
