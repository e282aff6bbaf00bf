"""No module of the library, its scripts or its benchmarks is over 400 lines (issue #38): split one by meaning."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400


def long_modules(root: Path, limit: int = MAX_LINES) -> list[str]:
    """``"path: N lines"`` for every ``.py`` file under ``mathcircuits/``, ``scripts/`` and ``benchmarks/`` over
    ``limit`` lines."""
    out = []
    for folder in ("mathcircuits", "scripts", "benchmarks"):
        for path in sorted((root / folder).rglob("*.py")):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > limit:
                out.append(f"{path.relative_to(root)}: {n} lines")
    return out


def test_no_module_is_over_400_lines():
    too_long = long_modules(ROOT)
    assert not too_long, f"over {MAX_LINES} lines: {too_long}. Fix: split each by meaning (one concern per module)."


def test_the_walk_finds_a_long_module(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "scripts" / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert long_modules(tmp_path) == [f"scripts/long.py: {MAX_LINES + 1} lines"]
