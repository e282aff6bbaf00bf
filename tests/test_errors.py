"""Refused inputs raise a FixableError with the problem and the fix as fields; no code reads them out of a message."""

from __future__ import annotations

import ast
import builtins
import importlib
import pickle
from pathlib import Path

import pytest

from mathcircuits import FixableError
from mathcircuits.numbers import TooFewCorrect
from mathcircuits.pipeline import ConfigError
from mathcircuits.pipeline.run import is_input_error

PACKAGE = Path(__file__).resolve().parents[1] / "mathcircuits"


def _raises(path: Path):
    """(class name, call) of each ``raise Name(...)`` in a module."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
            yield node.exc.func.id, node.exc


def _says_fix(call: ast.Call) -> bool:
    return any(isinstance(c, ast.Constant) and isinstance(c.value, str) and "Fix:" in c.value for c in ast.walk(call))


def _unfixable_with_fix(root: Path) -> list[str]:
    """Raise sites whose message says ``Fix:`` but whose class is not a FixableError (nor an OS error): the
    pipeline would word them as internal errors."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        names = vars(importlib.import_module(module))
        for name, call in _raises(path):
            cls = names.get(name, getattr(builtins, name, None))
            if isinstance(cls, type) and not issubclass(cls, (FixableError, OSError)) and _says_fix(call):
                bad.append(f"{path.relative_to(root.parent)}:{call.lineno} raises {name} with a Fix")
    return bad


def test_every_raise_that_names_a_fix_is_a_fixable_error():
    assert _unfixable_with_fix(PACKAGE) == []


def test_the_scan_finds_a_plain_error_that_names_a_fix(tmp_path):
    pkg = tmp_path / "planted_errors_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(
        "def f(x):\n    if x:\n        raise ValueError('x is bad. Fix: pass another x.')\n"
        "    raise KeyError('no fix named here')\n"
    )
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        assert _unfixable_with_fix(pkg) == ["planted_errors_pkg/m.py:3 raises ValueError with a Fix"]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("planted_errors_pkg.m", None)
        sys.modules.pop("planted_errors_pkg", None)


def test_problem_and_fix_are_fields_and_the_message_keeps_the_house_form():
    err = ConfigError("data.n_per_template is 0. ", "give at least 1.")
    assert str(err) == "data.n_per_template is 0. Fix: give at least 1."
    assert (err.problem, err.fix) == ("data.n_per_template is 0", "give at least 1")
    assert isinstance(err, ValueError)  # `except ValueError` still catches it
    back = pickle.loads(pickle.dumps(err))  # e.g. from a worker process: both fields survive
    assert type(back) is ConfigError and (back.problem, back.fix, str(back)) == (err.problem, err.fix, str(err))
    few = TooFewCorrect("only 3 of 40 prompts are answered correctly", "use a larger model")  # its own __init__
    again = pickle.loads(pickle.dumps(few))
    assert type(again) is TooFewCorrect and str(again) == str(few) and again.problem == few.problem
    whole = ConfigError("--model: x is bad. Fix: use y.")  # a message that carries its fix in its text
    assert whole.fix is None and str(whole) == "--model: x is bad. Fix: use y."


@pytest.mark.parametrize(
    ("err", "worded"),
    [
        (ConfigError("a. ", "b."), True),
        (FileNotFoundError(2, "No such file or directory", "x.yaml"), True),
        (ValueError("looks worded. Fix: but is not a FixableError"), False),  # the class decides, not the text
        (RuntimeError("boom"), False),
    ],
)
def test_the_pipeline_words_errors_by_class_not_by_message(err, worded):
    assert is_input_error(err) is worded
