"""Tests import what they use from where it lives, and nothing private.

A name in a package's ``__all__`` (the public names: docs/api.md) is imported from the package or
from its module; any other name from the module that defines it, never through a package that does
not export it. No test imports a private module or name (one that starts with ``_``).

A module is imported whole only to break one of its internals on purpose (fault injection with
``monkeypatch``); those modules are listed here, so a new one is a decision, not a slip."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
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

#: private modules a test imports names from on purpose, each with its reason (a new one is a decision, not a slip).
PRIVATE_IMPORTS = {
    # the saved format's flat keys decode to Interval fields and encode back the same: a property of the codec
    # itself, which no public loader exposes for a nested record alone (test_numbers)
    "mathcircuits._codec",
}


def _wrong_import(module: str, names: list[str]) -> bool:
    if module in PRIVATE_IMPORTS:
        return False
    if any(p.startswith("_") for p in module.split(".")) or any(n.startswith("_") for n in names):
        return True
    mod = importlib.import_module(module)
    if not hasattr(mod, "__path__"):  # a module: any of its names
        return False
    exported = set(getattr(mod, "__all__", ()))
    submodule = {n for n in names if importlib.util.find_spec(f"{module}.{n}") is not None}
    return bool(set(names) - exported - submodule)


def test_tests_import_only_public_names():
    wrong = []
    for path in sorted(TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mathcircuits"):
                names = [a.name for a in node.names]
                if _wrong_import(node.module, names):
                    wrong.append(f"{path.name}:{node.lineno} from {node.module} import {', '.join(names)}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("mathcircuits.") and alias.name not in PATCHED_MODULES:
                        wrong.append(f"{path.name}:{node.lineno} import {alias.name}")
    assert not wrong, "tests import a private name, or a name through a package that does not export it:\n" + (
        "\n".join(wrong)
    )


def test_module_all_lists_only_public_names():
    """Each package's ``__all__`` names what it defines or imports; each module's ``__all__`` only public names."""
    import mathcircuits

    packages = ["mathcircuits"] + [
        info.name
        for info in pkgutil.walk_packages(mathcircuits.__path__, "mathcircuits.")
        if info.ispkg and not any(p.startswith("_") for p in info.name.split("."))
    ]
    public: set[tuple[str, int]] = set()
    for name in packages:
        pkg = importlib.import_module(name)
        missing = [n for n in pkg.__all__ if not hasattr(pkg, n)]
        assert not missing, f"{name}.__all__ names {missing}, which it lacks"
        public |= {(n, id(getattr(pkg, n))) for n in pkg.__all__}
    for info in pkgutil.walk_packages(mathcircuits.__path__, "mathcircuits."):
        mod = importlib.import_module(info.name)
        if info.ispkg or info.name in ("mathcircuits.cli", "mathcircuits.power"):
            continue  # packages are the public lists; cli and power are public modules of their own
        extra = [n for n in getattr(mod, "__all__", ()) if (n, id(getattr(mod, n))) not in public]
        assert not extra, f"{info.name}.__all__ lists {extra}, which no package exports (the public names)"
