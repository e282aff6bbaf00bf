"""Evaluate one model on several benchmarks at once and collect an :class:`EvalResult`.

Usage::

    result = evaluate_model(model, tok, ["SVAMP", "ARC-Easy"], label="base", limit=50, style="chat")
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from mathcircuits.evaluation.benchmarks import benchmark_spec, load_benchmark
from mathcircuits.evaluation.generation import DEFAULT_STOP
from mathcircuits.evaluation.harness import LM_EVAL_BENCHMARKS, evaluate_lm_eval
from mathcircuits.evaluation.prompts import PromptStyle, select_exemplars
from mathcircuits.evaluation.scoring import BenchmarkScore, Normalization, evaluate_math
from mathcircuits.evaluation.table import EvalResult, EvalSettings

__all__ = ["evaluate_model", "score_benchmark"]

log = logging.getLogger(__name__)


def score_benchmark(
    model: torch.nn.Module,
    tokenizer: Any,
    name: str,
    path: str | os.PathLike | None = None,
    split: str | None = None,
    limit: int | None = None,
    seed: int = 0,
    n_shot: int = 0,
    style: PromptStyle = "plain",
    max_new_tokens: int = 256,
    stop: Sequence[str] = DEFAULT_STOP,
    normalization: Normalization = "none",
    batch_size: int = 8,
    progress: bool = True,
) -> BenchmarkScore:
    """Load one benchmark and score it: through lm-eval where it has the task, else by our math scorer.

    ``path`` None: the default root, else the Hub; ``split`` None: ``test`` (``validation`` for CommonsenseQA);
    ``limit`` items drawn with ``seed``, which also draws the ``n_shot`` exemplars (math only; ValueError without
    a train split). ``style`` and ``stop`` apply to our scorer only (lm-eval's GSM8K uses its own
    "Question: …\nAnswer:"); ``normalization``: ``"none"`` (lm-eval's ``acc``) or ``"chars"`` (``acc_norm``).
    """
    spec = benchmark_spec(name)
    items = load_benchmark(spec.name, split=split, path=path, limit=limit, seed=seed)
    exemplars = []
    if spec.kind == "math" and n_shot > 0:
        if "train" not in spec.splits:
            raise ValueError(f"{spec.name} has no train split to draw {n_shot} exemplars from; use n_shot=0.")
        exemplars = select_exemplars(load_benchmark(spec.name, split="train", path=path), n_shot, seed)
    if spec.name in LM_EVAL_BENCHMARKS:
        return evaluate_lm_eval(
            model,
            tokenizer,
            items,
            exemplars=exemplars,
            normalization=normalization,
            batch_size=batch_size,
            max_new_tokens=max_new_tokens,
        )
    if spec.kind == "math":
        return evaluate_math(
            model,
            tokenizer,
            items,
            exemplars=exemplars,
            style=style,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            stop=stop,
            progress=progress,
        )
    raise ValueError(
        f"{spec.name} is a multiple-choice benchmark that lm-eval does not score here; add it to LM_EVAL_BENCHMARKS."
    )


def evaluate_model(
    model: torch.nn.Module,
    tokenizer: Any,
    benchmarks: Sequence[str],
    label: str,
    path: str | os.PathLike | Mapping[str, str | os.PathLike | None] | None = None,
    limit: int | None = None,
    seed: int = 0,
    n_shot: int = 0,
    style: PromptStyle = "plain",
    max_new_tokens: int = 256,
    normalization: Normalization = "none",
    batch_size: int = 8,
    progress: bool = True,
) -> EvalResult:
    """Score ``model`` on each of ``benchmarks`` and collect their accuracies (the Table 1 protocol).

    Args:
        path: where the benchmark files are (None: the default root, else the Hub); a mapping gives each
            benchmark its own (a benchmark it does not name: None).
        limit: items per benchmark, drawn with ``seed`` (None: all).
        normalization: choice: ``"none"`` (lm-eval's ``acc``) or ``"chars"`` (``acc_norm``).
    """
    scores = []
    for name in benchmarks:
        score = score_benchmark(
            model,
            tokenizer,
            name,
            path=path.get(name) if isinstance(path, Mapping) else path,
            limit=limit,
            seed=seed,
            n_shot=n_shot,
            style=style,
            max_new_tokens=max_new_tokens,
            normalization=normalization,
            batch_size=batch_size,
            progress=progress,
        )
        log.info("%s on %s: accuracy %.3f over %d items", label, score.benchmark, score.accuracy, score.n)
        scores.append(score)
    settings = EvalSettings(
        limit=limit,
        seed=seed,
        n_shot=n_shot,
        style=style,
        max_new_tokens=max_new_tokens,
        normalization=normalization,
    )
    return EvalResult.from_scores(label, scores, settings)
