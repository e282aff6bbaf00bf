"""A study added from outside the package runs, shows in ``status``, gets its section and its claim, with no edit to
mathcircuits (tests/outside_study.py is the user's package); and the registry is the only place studies are named.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
from collections import Counter
from pathlib import Path

import outside_study
import pytest
import yaml

from mathcircuits.cli import main
from mathcircuits.patching import KeyComponents
from mathcircuits.pipeline import (
    RunConfig,
    all_studies,
    plugins,
    register_study,
    run_pipeline,
    stages,
    unregister_study,
)

ROOT = Path(__file__).resolve().parents[1]
TINY_YAML = ROOT / "configs" / "tiny.yaml"


@pytest.fixture
def spread():
    register_study(outside_study.STUDY)
    yield outside_study.STUDY
    unregister_study("spread")


def test_a_registered_study_joins_the_registry_and_the_config(spread):
    assert list(all_studies())[-1] == "spread" and list(stages())[-2:] == ["spread", "report"]
    assert "spread" in stages()["report"].reads
    cfg = RunConfig.from_dict({"spread": {"max_layers": 3}})
    assert cfg.section("spread").max_layers == 3 and cfg.to_dict()["spread"] == {"enabled": True, "max_layers": 3}
    assert RunConfig().section("spread").max_layers == 2  # its defaults, when the config does not name it
    with pytest.raises(ValueError, match="max_layers"):
        RunConfig.from_dict({"spread": {"max_layers": 0}})  # its ranges are checked like a built-in section's


def test_without_it_the_config_refuses_its_section():
    with pytest.raises(ValueError, match="unknown config sections"):
        RunConfig.from_dict({"spread": {"max_layers": 3}})


def test_a_name_taken_or_a_wrong_record_is_refused(spread):
    with pytest.raises(plugins.StudyError, match="registered already"):
        register_study(outside_study.Study("spread", "x", (), (), code=outside_study._code))
    with pytest.raises(plugins.StudyError, match="not a study record"):
        register_study("spread")  # type: ignore[arg-type]


def test_a_study_named_like_a_builtin_or_reading_an_unknown_study_is_refused():
    clash = outside_study.Study("identify", "x", (), (), code=outside_study._code)
    register_study(clash)
    try:
        with pytest.raises(plugins.StudyError, match="like a built-in stage"):
            all_studies()
    finally:
        unregister_study("identify")
    orphan = outside_study.Study("orphan", "x", (), ("nowhere",), code=outside_study._code)
    register_study(orphan)
    try:
        with pytest.raises(plugins.StudyError, match="reads \\['nowhere'\\]"):
            all_studies()
    finally:
        unregister_study("orphan")


def test_an_entry_point_registers_a_study(tmp_path, monkeypatch):
    dist = tmp_path / "spread_study-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: spread-study\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[mathcircuits.studies]\nspread = outside_study:STUDY\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "_LOADED", False)
    try:
        assert "spread" in all_studies()
    finally:
        unregister_study("spread")


def test_a_broken_entry_point_says_which_package(tmp_path, monkeypatch):
    dist = tmp_path / "broken_study-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-study\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[mathcircuits.studies]\nbroken = no_such_module_here:STUDY\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "_LOADED", False)
    with pytest.raises(plugins.StudyError, match="'broken'.*cannot be loaded"):
        all_studies()


@pytest.mark.integration
def test_an_outside_study_runs_shows_in_status_and_reaches_the_report_and_the_card(spread, tmp_path):
    out = tmp_path / "run"
    cfg = RunConfig.from_dict(yaml.safe_load(TINY_YAML.read_text()) | {"spread": {"max_layers": 1}})
    summaries = run_pipeline(cfg, out, progress=False)
    assert list(summaries)[-2:] == ["spread", "report"]
    key = KeyComponents.load(out / "identify" / "key_components.json")
    planted = dict(sorted(Counter(str(h.layer) for h in key.heads).items()))
    assert summaries["spread"].per_layer == planted  # what the study measured, recovered independently

    card = {c.id: c for c in summaries["report"].claims}
    assert "X1" in card and list(card)[-1] == "X1"  # after the paper's claims and N1–N3
    assert card["X1"].verdict == ("holds" if len(planted) <= 1 else "does not hold")
    html = (out / "report" / "report.html").read_text()
    assert 'id="spread"' in html and "The key heads sit in" in html
    assert (out / "report" / "figures" / "spread.html").is_file()

    (out / "cfg.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["status", "--out", str(out), "--config", str(out / "cfg.yaml")])
    assert code == 0 and re.search(r"^spread\s+done", buf.getvalue(), re.MULTILINE), buf.getvalue()


RUNNER_FILES = (
    "pipeline/run.py",
    "pipeline/report.py",
    "pipeline/registry.py",
    "pipeline/study.py",
    "pipeline/reader.py",
    "report/build.py",
    "claims/card.py",
)


def _named(tree: ast.AST) -> list[str]:
    """The identifiers and string constants of a module's code (docstrings left out)."""
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            out.append(n.id)
        elif isinstance(n, ast.Attribute):
            out.append(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            out.extend(re.findall(r"\w+", n.value))
    return out


def test_no_study_is_named_in_the_runner_the_report_builder_or_the_card_builder():
    """Studies are named in their folders and the built-in list only: the runner, the report and the card loop."""
    names = set(all_studies())
    for rel in RUNNER_FILES:
        hits = sorted(names & set(_named(ast.parse((ROOT / "mathcircuits" / rel).read_text()))))
        assert not hits, (rel, hits)


def test_the_name_check_finds_a_planted_name():
    planted = 'def f(ctx):\n    """Reads identify."""\n    return ctx.paths.marker("identify")\n'
    assert "identify" in _named(ast.parse(planted))
    assert "identify" not in _named(ast.parse('def f():\n    """Reads identify."""\n'))
