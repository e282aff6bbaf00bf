"""The first call does less: a fast-path check passed in one process is read, not re-run, by the next one on the
same model, dtype, device, versions and code; anything changed, or a damaged file, runs it again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mathcircuits.models import load_model, verify_once
from mathcircuits.models.forward import verdicts

ROOT = Path(__file__).resolve().parents[1]

# One process: the real check of the exact scan on tiny Llama; prints what checks_run recorded. With an argument,
# the installed torch reports that version (as after an upgrade; the version check is told to allow it).
PROCESS = """
import importlib.metadata, json, os, sys
if len(sys.argv) > 1:
    real = importlib.metadata.version
    importlib.metadata.version = lambda name: sys.argv[1] if name == "torch" else real(name)
    os.environ["MATHCIRCUITS_ALLOW_UNTESTED_VERSIONS"] = "1"
from mathcircuits.models import checks_run, load_model, verify_once
from mathcircuits.patching.checks import check_exact
model = load_model("tiny-llama")
verify_once(model.bridge, "exact path patching", lambda: check_exact(model))
print(json.dumps([c.to_dict() for c in checks_run()]))
"""


def _process(cache: Path, *args: str) -> dict:
    env = {**os.environ, verdicts.ENV: str(cache), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", PROCESS, *args], capture_output=True, text=True, env=env, cwd=ROOT, check=True
    )
    (record,) = [r for r in json.loads(out.stdout.strip().splitlines()[-1]) if r["path"] == "exact path patching"]
    return record


@pytest.mark.integration
def test_a_second_process_reads_the_pass_and_a_changed_version_runs_it_again(tmp_path):
    first = _process(tmp_path)
    assert not first["cached"] and 0 <= first["difference"] <= first["tolerance"]
    saved = len(list(tmp_path.glob("*.json")))  # this check's pass and those of the fast paths it ran
    assert saved >= 1
    second = _process(tmp_path)
    assert second["cached"]
    assert (second["difference"], second["tolerance"]) == (first["difference"], first["tolerance"])
    assert len(list(tmp_path.glob("*.json"))) == saved
    assert second["seconds"] < first["seconds"]  # it read a file instead of running probe forwards
    upgraded = _process(tmp_path, "99.0")
    assert not upgraded["cached"]  # another torch: the check runs again, under another key
    assert len(list(tmp_path.glob("*.json"))) == 2 * saved


def _counting(calls: list[int], result: tuple[float, float] = (0.0, 1.0)):
    def check() -> tuple[float, float]:
        calls.append(1)
        return result

    return check


def test_the_key_follows_model_versions_and_code_and_a_damaged_file_is_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv(verdicts.ENV, str(tmp_path))
    calls: list[int] = []
    verify_once(load_model("tiny-llama").bridge, "probe path", _counting(calls))
    record = verify_once(load_model("tiny-llama").bridge, "probe path", _counting(calls))  # another object
    assert calls == [1] and record is not None and record.cached
    verify_once(load_model("tiny-llama", seed=1).bridge, "probe path", _counting(calls))  # other weights
    assert calls == [1, 1]
    real = verdicts.dependency_versions
    monkeypatch.setattr(verdicts, "dependency_versions", lambda: {**real(), "transformers": "0.0-changed"})
    verify_once(load_model("tiny-llama").bridge, "probe path", _counting(calls))
    assert calls == [1, 1, 1]
    monkeypatch.setattr(verdicts, "dependency_versions", real)
    for file in tmp_path.glob("*.json"):
        file.write_text(file.read_text()[:40])  # cut short, as by a full disk
    with pytest.warns(RuntimeWarning, match="ignoring the saved check verdict"):
        record = verify_once(load_model("tiny-llama").bridge, "probe path", _counting(calls))
    assert calls == [1, 1, 1, 1] and record is not None and not record.cached
    assert verify_once(load_model("tiny-llama").bridge, "probe path", _counting(calls)).cached  # rewritten whole


def test_a_file_that_states_a_failure_or_another_key_is_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv(verdicts.ENV, str(tmp_path))
    calls: list[int] = []
    verify_once(load_model("tiny-llama").bridge, "probe path", _counting(calls))
    (file,) = tmp_path.glob("*.json")
    saved = json.loads(file.read_text())
    for edit in ({"record": {**saved["record"], "difference": 2.0}}, {"key": "0" * 32}):
        file.write_text(json.dumps({**saved, **edit}))
        with pytest.warns(RuntimeWarning, match="does not state a pass"):
            verify_once(load_model("tiny-llama").bridge, "probe path", _counting(calls))
    assert len(calls) == 3


def test_off_neither_reads_nor_writes(tmp_path, monkeypatch):
    monkeypatch.setenv(verdicts.ENV, "off")
    monkeypatch.setenv("MATHCIRCUITS_CACHE", str(tmp_path))
    calls: list[int] = []
    for _ in range(2):
        verify_once(load_model("tiny-llama").bridge, "probe path", _counting(calls))
    assert calls == [1, 1] and not (tmp_path / "checks").exists()  # where it would save them
