"""LLM-Adapters benchmark files as ``BenchmarkItem`` lists (math word problems, ARC, BoolQ, OpenBookQA).

The files are ``<root>/<folder>/{train,test}.json``.

Math records: ``instruction`` (+ ``input``) is the question, ``answer`` the gold, ``output`` (minus ``"A:"``)
the rationale. Choice records hold the options inside ``instruction`` ("Answer1: ... Answer2: ...") and the
gold as ``"answer2"`` (ARC, OpenBookQA) or ``"true"`` / ``"false"`` (BoolQ). Every ``train.json`` record
also appears in ``test.json``; :func:`~mathcircuits.evaluation.evaluate_math` therefore drops exemplars.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import datasets

from mathcircuits._errors import FixableFileNotFoundError
from mathcircuits.data.benchmark_files import (
    ENV_ROOT,
    WordProblem,
    default_benchmark_root,
    find_benchmark_file,
    read_benchmark_split,
    record_question,
)
from mathcircuits.evaluation.items import BenchmarkItem, Kind

__all__: list[str] = []

log = logging.getLogger(__name__)

# LLM-Adapters: test files from main, train files from the earlier commit they were taken from.
_LLM_ADAPTERS_URL = "https://raw.githubusercontent.com/AGI-Edgerunners/LLM-Adapters/{ref}/dataset/{folder}/{split}.json"
_LLM_ADAPTERS_TRAIN_REF = "d6b282dc58d08a73635eab039e2f6c2fbd92775a"

_CHOICE_PREFIX = re.compile(r"^\s*Please choose the correct answer to the question:\s*", re.IGNORECASE)
_BOOL_PREFIX = re.compile(r"^\s*Please answer the following question with true or false,\s*question:\s*", re.IGNORECASE)
_FORMAT_SUFFIX = re.compile(r"\n*\s*Answer format:.*$", re.IGNORECASE | re.DOTALL)
BOOL_CHOICES = ("yes", "no")


def parse_choice_record(record: WordProblem, benchmark: str = "", uid: str = "") -> BenchmarkItem:
    """An LLM-Adapters multiple-choice record as a choice item.

    ``"Please choose ... question: Q\\n\\nAnswer1: a Answer2: b\\n\\nAnswer format: ..."`` with
    answer ``"answer2"`` gives ``question="Q"``, ``choices=("a", "b")``, ``gold_index=1``.
    A true/false record (BoolQ) gives ``choices=("yes", "no")``, gold 0 for ``"true"``.
    """
    text = str(record.get("instruction", ""))
    gold = str(record.get("answer", "")).strip().lower()
    body = _FORMAT_SUFFIX.sub("", text)
    if gold in ("true", "false"):
        question = _BOOL_PREFIX.sub("", body).strip()
        return BenchmarkItem(
            benchmark,
            question,
            BOOL_CHOICES[gold == "false"],
            BOOL_CHOICES,
            int(gold == "false"),
            str(record.get("output", "")),
            uid,
        )
    # Options are numbered 1..n in order; search each label after the previous one so an
    # option text that mentions "answer" cannot split the list.
    starts: list[tuple[int, int]] = []
    pos = 0
    for k in range(1, 27):
        m = re.compile(rf"Answer{k}\s*:", re.IGNORECASE).search(body, pos)
        if m is None:
            break
        starts.append((m.start(), m.end()))
        pos = m.end()
    m_gold = re.fullmatch(r"answer(\d+)", gold)
    if len(starts) < 2 or m_gold is None:
        raise ValueError(
            f"{benchmark or 'record'} {uid}: cannot parse options/answer from instruction {text[:120]!r} "
            f"with answer {record.get('answer')!r}. Expected 'Answer1: ... Answer2: ...' in the instruction and "
            "an answer like 'answer2' or 'true'/'false' (the LLM-Adapters format); fix the record or the file."
        )
    question = _CHOICE_PREFIX.sub("", body[: starts[0][0]]).strip()
    choices = tuple(
        body[s_end : (starts[i + 1][0] if i + 1 < len(starts) else len(body))].strip()
        for i, (_, s_end) in enumerate(starts)
    )
    gold_index = int(m_gold.group(1)) - 1
    if not 0 <= gold_index < len(choices):
        raise ValueError(
            f"{benchmark or 'record'} {uid}: gold {gold!r} is out of range for {len(choices)} options; "
            "fix the answer field of that record."
        )
    return BenchmarkItem(
        benchmark, question, choices[gold_index], choices, gold_index, str(record.get("output", "")), uid
    )


def _math_record(record: WordProblem, benchmark: str, uid: str) -> BenchmarkItem:
    rationale = re.sub(r"^\s*A:\s*", "", str(record.get("output", "") or "")).strip()
    answer = str(record["answer"]).strip()
    return BenchmarkItem(benchmark, record_question(record), answer, rationale=rationale, uid=uid)


def load_llm_adapters(
    name: str,
    folder: str,
    kind: Kind,
    split: str = "test",
    path: str | os.PathLike | None = None,
) -> list[BenchmarkItem]:
    """Load ``<root>/<folder>/<split>.json`` (LLM-Adapters format) as benchmark items.

    Uids are ``"<split>-<index>"``; ``kind`` says how a record is parsed. ``path``: the root, the benchmark
    folder or the file itself; None: the default root
    (:func:`~mathcircuits.data.benchmark_files.default_benchmark_root`),
    else a download from the LLM-Adapters repository.
    """
    file = find_benchmark_file(folder, split, path)
    if file is not None:
        records, origin = read_benchmark_split(folder, split, file) or [], str(file)
    elif path is None:
        records, origin = _llm_adapters_from_hub(name, folder, split), "hub"
    else:
        raise FixableFileNotFoundError(
            f"{name}: no {split}.json found at {Path(path)} (looked for the file itself, {split}.json in it, and "
            f"{folder}/{split}.json under it). ",
            f"pass the folder holding '{folder}/{split}.json' (e.g. ../shared/data/benchmarks) or set ${ENV_ROOT}.",
        )
    parse = _math_record if kind == "math" else parse_choice_record
    items = [parse(r, name, f"{split}-{i}") for i, r in enumerate(records)]
    log.info("loaded %d %s items of %s from %s", len(items), split, name, origin)
    return items


def _llm_adapters_from_hub(name: str, folder: str, split: str) -> list[WordProblem]:

    ref = _LLM_ADAPTERS_TRAIN_REF if split == "train" else "main"
    url = _LLM_ADAPTERS_URL.format(ref=ref, folder=folder, split=split)
    root = default_benchmark_root()
    try:
        ds = datasets.load_dataset("json", data_files=url, split="train")
    except Exception as err:  # network, 404, offline mode: all end in the same advice
        raise FixableFileNotFoundError(
            f"{name}: no local copy of {folder}/{split}.json (default root: "
            f"{root if root else f'${ENV_ROOT} unset and ../shared/data/benchmarks missing'}) and the download "
            f"from {url} failed ({type(err).__name__}: {err}). ",
            f"pass path= to the LLM-Adapters dataset folder or set ${ENV_ROOT}.",
        ) from err
    return [dict(r) for r in ds]
