"""Benchmarks through EleutherAI's lm-evaluation-harness (``lm-eval`` 0.4.x), offline, on an in-memory model.

The field compares models with lm-eval, so its numbers can be set beside published ones. Multiple choice
(MMLU, ARC, BoolQ, OpenBookQA, CommonsenseQA) runs ``lm_eval_tasks/choice.yaml``: lm-eval's ARC prompt
(``"Question: …\\nAnswer:"``, each option after a space), ``acc`` and ``acc_norm`` (per character). GSM8K
runs lm-eval's ``gsm8k`` task (greedy, stop at ``"Question:"``, ``flexible-extract``). Items come from our
loaders through a JSONL file, so nothing is downloaded (``HF_DATASETS_OFFLINE=1`` while it runs).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import torch
import yaml

from mathcircuits._files import JSONObject
from mathcircuits.evaluation.items import BenchmarkItem
from mathcircuits.evaluation.scoring import BenchmarkScore, ScoreSettings

__all__ = [
    "evaluate_lm_eval",
]

log = logging.getLogger(__name__)

LM_EVAL_BENCHMARKS = ("MMLU", "ARC-Easy", "ARC-Challenge", "BoolQ", "OpenBookQA", "CommonsenseQA", "GSM8K")
"""The benchmarks scored through lm-eval; the others (AddSub, SingleEq, SVAMP) keep our scorer."""


def _template(kind: str) -> JSONObject:
    text = resources.files("mathcircuits.evaluation").joinpath("lm_eval_tasks", f"{kind}.yaml").read_text()
    return yaml.safe_load(text)


def _task_name(benchmark: str) -> str:
    return "mathcircuits_" + "".join(c if c.isalnum() else "_" for c in benchmark.lower())


def lm_eval_task_config(
    items: Sequence[BenchmarkItem], folder: str | os.PathLike, exemplars: Sequence[BenchmarkItem] = ()
) -> JSONObject:
    """An lm-eval task config (a dict, as from YAML) that reads ``items`` from a JSONL file in ``folder``.

    ``folder`` must outlive the lm-eval run. Math ``exemplars`` are written as the ``train`` split
    (``num_fewshot`` = their count). Raises ValueError for no items or a mix of kinds.
    """
    if not items:
        raise ValueError("lm_eval_task_config got no items; load a benchmark first (load_benchmark(name, ...)).")
    kinds = {it.kind for it in items}
    if len(kinds) != 1:
        raise ValueError(f"items of one benchmark must share a kind, got {sorted(kinds)}; score them apart.")
    kind = kinds.pop()
    name = _task_name(items[0].benchmark)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)

    def write(split: str, rows: list[JSONObject]) -> str:
        path = folder / f"{name}_{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(path)

    if kind == "choice":
        cfg = _template("choice")
        rows = [{"question": it.question, "choices": list(it.choices), "gold": it.gold_index} for it in items]
        cfg["dataset_kwargs"] = {"data_files": {"test": write("test", rows)}}
    else:
        cfg = _template("gsm8k")
        files = {"test": write("test", [{"question": it.question, "answer": it.answer} for it in items])}
        if exemplars:
            rows = [
                {"question": ex.question, "answer": f"{ex.rationale} The answer is {ex.answer}."} for ex in exemplars
            ]
            files["train"] = write("train", rows)
            cfg["fewshot_split"] = "train"
            cfg["num_fewshot"] = len(exemplars)
            cfg["fewshot_config"] = {"sampler": "first_n"}
        cfg["dataset_kwargs"] = {"data_files": files}
    cfg["task"] = name
    return cfg


@lru_cache(maxsize=1)
def _task_manager() -> Any:
    from lm_eval.tasks import TaskManager

    return TaskManager(include_defaults=False)


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    keys = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
    old = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: "1" for k in keys})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def evaluate_lm_eval(
    model: torch.nn.Module,
    tokenizer: Any,
    items: Sequence[BenchmarkItem],
    exemplars: Sequence[BenchmarkItem] = (),
    normalization: Literal["none", "chars"] = "none",
    batch_size: int = 8,
    max_new_tokens: int = 256,
) -> BenchmarkScore:
    """Score one benchmark's items with lm-eval on the in-memory ``model`` (offline).

    Math ``exemplars`` are used in order (lm-eval's ``first_n`` sampler); ``normalization`` ``"none"`` is lm-eval's
    ``acc``, ``"chars"`` its ``acc_norm``. One outcome per item, in order, with lm-eval's per-item responses
    (``option_scores``: the options' log-likelihoods; ``predictions``).
    """
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    if normalization not in ("none", "chars"):
        raise ValueError(f"normalization={normalization!r}: lm-eval has 'none' (acc) and 'chars' (acc_norm).")
    with tempfile.TemporaryDirectory(prefix="mathcircuits-lm-eval-") as tmp, _offline():
        cfg = lm_eval_task_config(items, tmp, exemplars)
        if items[0].kind == "math":
            cfg["generation_kwargs"]["max_gen_toks"] = max_new_tokens
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
        out = simple_evaluate(
            model=lm,
            tasks=[cfg],
            task_manager=_task_manager(),
            log_samples=True,
            bootstrap_iters=0,
            verbosity="WARNING",
        )
    samples = sorted(out["samples"][cfg["task"]], key=lambda s: s["doc_id"])
    if len(samples) != len(items):
        raise RuntimeError(f"lm-eval returned {len(samples)} samples for {len(items)} items of {items[0].benchmark}.")
    if items[0].kind == "choice":
        metric = "acc" if normalization == "none" else "acc_norm"
        scores = [tuple(float(r[0]) for r in s["filtered_resps"]) for s in samples]
        correct = [bool(s[metric]) for s in samples]
        if normalization == "chars":
            lens = [[len(c) for c in it.choices] for it in items]  # lm-eval: characters of the option text
            chosen = [max(range(len(sc)), key=lambda i, sc=sc, n=n: sc[i] / n[i]) for sc, n in zip(scores, lens)]
        else:
            chosen = [max(range(len(sc)), key=sc.__getitem__) for sc in scores]
        predictions = [it.choices[c] for it, c in zip(items, chosen)]
        extra: dict[str, Any] = {"option_scores": tuple(scores)}
    else:
        correct = [bool(s["exact_match"]) for s in samples]
        predictions = [str(s["resps"][0][0]) for s in samples]
        extra = {}
    return BenchmarkScore(
        benchmark=items[0].benchmark,
        kind=items[0].kind,
        uids=tuple(it.uid for it in items),
        golds=tuple(it.answer for it in items),
        predictions=tuple(predictions),
        correct=tuple(correct),
        settings=ScoreSettings(
            harness="lm-eval",
            lm_eval_version=_version(),
            task=cfg["task"],
            metric="acc" if items[0].kind == "choice" and normalization == "none" else
            "acc_norm" if items[0].kind == "choice" else "exact_match (flexible-extract)",
            n_shot=len(exemplars),
        ),
        **extra,
    )  # fmt: skip


def _version() -> str:
    from importlib.metadata import version

    return version("lm_eval")
