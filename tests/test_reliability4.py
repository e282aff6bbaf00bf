"""Reliability, round four: the borders where files and scripts come in.

Each bad input is driven through the API, the CLI or the script, and its outcome classified as in round three
(:func:`helpers.classify`): every one must end ``clear`` (exit 2 or the API's exception, one "Fix:", naming the
input, nothing written), never a traceback, a silent acceptance or a misleading message.

* no unsafe deserialisation anywhere in the repository (a planted pickle must not run);
* graph files (EAP-IG / MIB JSON) read for content: types, numbers, the model they were written for;
* compare-models: run locks, ``--out`` outside every run folder, file-system errors that name the path;
* models offline first: a name that is nothing known is refused at once, listing what is;
* the scripts (gpu-check.sh, run_notebooks.py) refuse bad arguments before any work, in one line.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers import classify, script_module

ROOT = Path(__file__).resolve().parents[1]
TINY_YAML = ROOT / "configs" / "tiny.yaml"


# ---- no unsafe deserialisation -------------------------------------------------------------------------------

#: (what, pattern) of loads that may run code from a file: pickle and its kin, YAML's full loaders.
UNSAFE = [
    ("weights_only=False", re.compile(r"weights_only\s*=\s*False")),
    ("pickle.load / pickle.loads", re.compile(r"\bpickle\.loads?\((?!pickle\.dumps\()")),
    ("yaml.load( (use yaml.safe_load or _files.load_yaml)", re.compile(r"\byaml\.(unsafe_)?load(_all)?\(")),
    ("a full YAML loader", re.compile(r"\b(Unsafe|Full)Loader\b|Loader\s*=\s*yaml\.Loader\b")),
    ("dill", re.compile(r"^\s*(import|from)\s+dill\b|\bdill\.", re.MULTILINE)),
    ("joblib.load", re.compile(r"\bjoblib\.load\(")),
    ("allow_pickle=True", re.compile(r"allow_pickle\s*=\s*True")),
    ("marshal.load / shelve", re.compile(r"\bmarshal\.loads?\(|\bshelve\.open\(")),
]


def _python_files() -> list[Path]:
    here = Path(__file__).resolve()
    files = [p for d in ("mathcircuits", "scripts", "benchmarks", "tests") for p in sorted((ROOT / d).rglob("*.py"))]
    return [p for p in files if p.resolve() != here]


def _torch_loads_without_weights_only(tree: ast.AST) -> list[int]:
    """Lines of ``torch.load(...)`` calls that do not pass ``weights_only=True`` (torch < 2.6 defaults to False)."""
    bad = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):  # fmt: skip
            kw = {k.arg: k.value for k in node.keywords}
            value = kw.get("weights_only")
            if not (isinstance(value, ast.Constant) and value.value is True):
                bad.append(node.lineno)
    return bad


def test_no_file_in_the_repository_deserialises_unsafely():
    """Every .py of the package, scripts, benchmarks and tests; ``pickle.loads(pickle.dumps(x))`` (a round trip of
    an object the test itself made, never bytes from a file) is the one use of pickle allowed."""
    found = []
    for path in _python_files():
        text = path.read_text()
        rel = path.relative_to(ROOT)
        for what, pattern in UNSAFE:
            for m in pattern.finditer(text):
                found.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {what}")
        found += [f"{rel}:{line}: torch.load without weights_only=True" for line in
                  _torch_loads_without_weights_only(ast.parse(text))]  # fmt: skip
    assert len(_python_files()) > 100  # the walk saw the repository
    assert not found, "\n".join(found)


def test_the_scan_finds_what_it_looks_for():
    planted = [
        "torch.load(p, weights_only=False)", "pickle.load(f)", "pickle.loads(b)", "yaml.load(text)",
        "yaml.load(t, Loader=yaml.Loader)", "import dill", "joblib.load(p)", "np.load(p, allow_pickle=True)",
    ]  # fmt: skip
    for line in planted:
        assert any(p.search(line) for _, p in UNSAFE), line
    assert _torch_loads_without_weights_only(ast.parse("torch.load(p)\ntorch.load(p, weights_only=True)\n")) == [1]
    assert not any(p.search("pickle.loads(pickle.dumps(err))") for _, p in UNSAFE)
    assert not any(p.search("yaml.safe_load(text)") for _, p in UNSAFE)


class _Planted:
    """A pickle that runs code when loaded: it touches the file named in its argument."""

    def __init__(self, target: str) -> None:
        self.target = target

    def __reduce__(self):
        return (Path.touch, (Path(self.target),))


def _run_folder(folder: Path, payload: object) -> Path:
    (folder / "identify").mkdir(parents=True)
    torch.save(payload, folder / "identify" / "p.pt")
    return folder


@pytest.mark.parametrize("name", ["identify/p.pt", "identify/p.unknown"])
def test_compare_run_outputs_refuses_a_planted_pickle_without_running_it(tmp_path, name, capsys):
    mod = script_module("compare_run_outputs")
    ran = tmp_path / "ran"
    a = _run_folder(tmp_path / "a", {"head_effects": torch.ones(2)})
    b = _run_folder(tmp_path / "b", {"head_effects": torch.ones(2)})
    if name != "identify/p.pt":
        (b / "identify" / "p.pt").rename(b / name)
        (a / "identify" / "p.pt").rename(a / name)
    torch.save({"head_effects": _Planted(str(ran))}, b / name)
    code = mod.main([str(a), str(b)])
    err = capsys.readouterr().err
    assert not ran.exists(), "the planted pickle ran"
    assert classify(code, err, (str(b / name), "pickled objects", "it names"), False) == "clear", err


def test_compare_run_outputs_refuses_a_damaged_torch_file(tmp_path, capsys):
    mod = script_module("compare_run_outputs")
    a = _run_folder(tmp_path / "a", {"x": torch.ones(2)})
    b = _run_folder(tmp_path / "b", {"x": torch.ones(2)})
    (b / "identify" / "p.pt").write_bytes(b"\x80\x02garbage")
    code = mod.main([str(a), str(b)])
    err = capsys.readouterr().err
    assert classify(code, err, (str(b / "identify" / "p.pt"), "not a readable torch file"), False) == "clear", err
