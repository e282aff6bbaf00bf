"""Benchmark files on disk: where they live, and the one reader of their JSON format.

The math word problems and multiple-choice sets of Zhang et al. (ICML 2024, Table 1) come from
LLM-Adapters (Hu et al., 2023) as ``<root>/<folder>/{train,test}.json`` (``data.word_problems``,
``evaluation`` and ``finetune`` read them, so the reader lives in this lowest layer).

Decontamination: the folders' ``train.json`` files are contained in their ``test.json`` files (SVAMP: all
800 train problems are among the 1000 test problems). :func:`read_benchmark_split` therefore drops from a
test split every record whose question (whitespace- and case-normalised) also occurs in the folder's train
split, so a model fine-tuned on train is never scored on it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Required, TypedDict

from mathcircuits._errors import FixableFileNotFoundError, FixableValueError
from mathcircuits._files import JSONValue

__all__: list[str] = []

ENV_ROOT = "MATHCIRCUITS_BENCHMARKS"
WORD_PROBLEM_SETS = ("AddSub", "SingleEq", "SVAMP", "gsm8k")
"""The LLM-Adapters math word-problem folders (each with ``test.json``) that knockout transfer can read."""
_REQUIRED = frozenset({"instruction", "answer"})


class WordProblem(TypedDict, total=False):
    """One LLM-Adapters record (a file's other keys are kept as they are)."""

    instruction: Required[str]
    input: str
    output: str
    answer: Required[JSONValue]  # text or a number, as the file has it
    source: str  # added by read_word_problems: the folder of the file


def default_benchmark_root() -> Path | None:
    """The folder that holds the benchmark folders (``SVAMP/``, ``ARC-Easy/``, ...).

    The rule, in order: ``$MATHCIRCUITS_BENCHMARKS`` when set (it must name an existing folder, else
    FileNotFoundError); the first existing of ``../shared/data/benchmarks`` and ``./shared/data/benchmarks``,
    relative to the working folder; None (the caller decides: skip word problems, or fetch from the Hub).
    """
    env = os.environ.get(ENV_ROOT)
    if env:
        root = Path(env).expanduser()
        if not root.is_dir():
            raise FixableFileNotFoundError(
                f"${ENV_ROOT} is {env!r}, which is not an existing folder. ",
                f"point ${ENV_ROOT} at the folder that holds SVAMP/, AddSub/, ... or unset it.",
            )
        return root
    for cand in (Path.cwd().parent / "shared" / "data" / "benchmarks", Path.cwd() / "shared" / "data" / "benchmarks"):
        if cand.is_dir():
            return cand
    return None


def find_benchmark_file(folder: str, split: str, path: str | os.PathLike | None = None) -> Path | None:
    """Resolve ``<folder>/<split>.json`` from a file, a benchmark folder or a root folder.

    The first existing of ``path``, ``path/<split>.json`` and ``path/<folder>/<split>.json`` (``path`` None:
    :func:`default_benchmark_root`), or None when none exists.
    """
    root = Path(path).expanduser() if path is not None else default_benchmark_root()
    if root is None:
        return None
    for cand in (root, root / f"{split}.json", root / folder / f"{split}.json"):
        if cand.is_file():
            return cand
    return None


def _read_one(path: Path) -> list[WordProblem]:
    if not path.is_file():
        raise FixableFileNotFoundError(
            f"benchmark file {path} does not exist. ",
            f"pass a JSON file in the LLM-Adapters format, "
            f"such as <benchmarks>/SVAMP/train.json (the benchmarks root is ${ENV_ROOT}).",
        )
    try:
        data: Any = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise FixableValueError(f"{path} is not valid JSON ({err}). ", "pass an LLM-Adapters JSON file.") from err
    bad = not isinstance(data, list) or any(not isinstance(r, dict) or not _REQUIRED <= set(r) for r in data)
    if bad:
        raise FixableValueError(
            f"{path} is not an LLM-Adapters JSON list of {{instruction, input, output, answer}} records. ",
            "point at such a file (or at the folder that holds it).",
        )
    return [{**r, "source": path.parent.name} for r in data]


def read_word_problems(*paths: str | os.PathLike, limit: int | None = None) -> list[WordProblem]:
    """Read LLM-Adapters JSON files (``[{"instruction", "input", "output", "answer"}, ...]``), concatenated.

    Every record must have at least ``instruction`` and ``answer`` (else ValueError). Each gets an added
    ``"source"``: the name of the folder that holds its file (e.g. ``"SVAMP"``). ``limit`` keeps the first
    records of the concatenation.
    """
    if not paths:
        raise FixableValueError(
            "read_word_problems got no path. ", "pass a file such as <benchmarks>/SVAMP/train.json."
        )
    records: list[WordProblem] = []
    for p in paths:
        records.extend(_read_one(Path(p).expanduser()))
    return records[:limit] if limit is not None else records


def record_question(record: WordProblem) -> str:
    """The question text of a record: its ``instruction``, then its ``input`` on a new line when not empty."""
    question = str(record.get("instruction", "")).strip()
    extra = str(record.get("input", "") or "").strip()
    return f"{question}\n{extra}" if extra else question


def _question_key(record: WordProblem) -> str:
    return " ".join(record_question(record).lower().split())


def decontaminate(test: list[WordProblem], train: list[WordProblem]) -> list[WordProblem]:
    """The test records whose question does not occur in ``train`` (whitespace- and case-normalised)."""
    seen = {_question_key(r) for r in train}
    return [r for r in test if _question_key(r) not in seen]


def read_benchmark_split(
    folder: str, split: str, path: str | os.PathLike | None = None, decontaminated: bool = True
) -> list[WordProblem] | None:
    """Read ``<folder>/<split>.json``; a test split drops what the folder's train split holds.

    ``path`` as in :func:`find_benchmark_file`; ``decontaminated=False`` keeps the overlap. None when no such
    file is found.
    """
    file = find_benchmark_file(folder, split, path)
    if file is None:
        return None
    records = read_word_problems(file)
    if split != "test" or not decontaminated:
        return records
    train = file.parent / "train.json"
    return decontaminate(records, read_word_problems(train)) if train.is_file() and train != file else records
