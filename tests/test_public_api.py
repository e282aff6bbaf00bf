"""Tests use the public API: names from ``mathcircuits`` or one of its subpackages, none private.

A module is imported whole only to break one of its internals on purpose (fault injection with
``monkeypatch``); those modules are listed here, so a new one is a decision, not a slip."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: modules the fault-injection tests patch from outside (the plain path must catch the breakage).
PATCHED_MODULES = {
    "mathcircuits._files",  # faults injected at the file layer: a full disk, a killed writer (test_reliability3)
    "mathcircuits.ablation.scorer",
    "mathcircuits.circuit.edges",
    "mathcircuits.data.correct",  # counted, not broken: correct_pairs scores no more pairs than it needs
    "mathcircuits.evaluation.generation",
    "mathcircuits.models.compat",
    "mathcircuits.patching.exact",
    "mathcircuits.pipeline.markers",  # a symlinked stage folder, a killed writer's leftovers (test_reliability3)
    "mathcircuits.pipeline.plugins",  # the entry points are read once: a test reads them again
    "mathcircuits.pipeline.studies.identify.stage",
    "mathcircuits.viz.export",
}


def _public_package(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "mathcircuits" and len(parts) <= 2 and not any(p.startswith("_") for p in parts)


def test_tests_import_only_public_names():
    wrong = []
    for path in sorted(TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mathcircuits"):
                names = [a.name for a in node.names]
                if not _public_package(node.module) or any(n.startswith("_") for n in names):
                    wrong.append(f"{path.name}:{node.lineno} from {node.module} import {', '.join(names)}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("mathcircuits.") and alias.name not in PATCHED_MODULES:
                        wrong.append(f"{path.name}:{node.lineno} import {alias.name}")
    assert not wrong, "tests reach past the public API:\n" + "\n".join(wrong)
