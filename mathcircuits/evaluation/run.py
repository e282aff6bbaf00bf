"""Evaluate one model on several benchmarks at once and collect an :class:`EvalResult`.

This is the Table 1 protocol of Zhang et al. (ICML 2024) in one call. The benchmarks
lm-evaluation-harness has (MMLU, ARC, BoolQ, OpenBookQA, CommonsenseQA, GSM8K; see
:data:`~mathcircuits.evaluation.harness.LM_EVAL_BENCHMARKS`) are scored by lm-eval on the
in-memory model (:func:`~mathcircuits.evaluation.harness.evaluate_lm_eval`); AddSub, SingleEq
and SVAMP by our generation scorer (zero- or few-shot, exemplars from the train split).

Usage::

    model, tok = load_hf_model("embedded")
    result = evaluate_model(model, tok, ["SVAMP", "ARC-Easy"], label="base", limit=50, style="chat")
    result.save("runs/base_eval.pt")
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
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

    Args:
        model: an HF causal LM.
        tokenizer: its tokenizer.
        name: a benchmark name or alias (see :data:`BENCHMARKS`).
        path: where its files are (None: the default root, else the Hub).
        split: the split to score (None: ``test``, or ``validation`` for CommonsenseQA).
        limit: score this many items, drawn with ``seed`` (None: all).
        seed: seed of the item draw and of the exemplar draw.
        n_shot: few-shot exemplars from the train split (math only).
        style: math prompt style (our scorer only; lm-eval's GSM8K uses its own "Question: …\nAnswer:").
        max_new_tokens: math generation budget.
        stop: math stop strings (our scorer only).
        normalization: choice: ``"none"`` (lm-eval's ``acc``) or ``"chars"`` (``acc_norm``).
        batch_size: batch size of generation or scoring.
        progress: show a progress bar.

    Returns:
        The benchmark's :class:`BenchmarkScore`.

    Raises:
        ValueError: ``n_shot > 0`` for a benchmark without a train split.
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
    path: str | os.PathLike | None = None,
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
        model: an HF causal LM.
        tokenizer: its tokenizer.
        benchmarks: benchmark names, e.g. ``["SVAMP", "ARC-Easy"]``.
        label: the model's name in the result (e.g. ``"base"``, ``"precise SFT"``).
        path: where the benchmark files are (None: the default root, else the Hub).
        limit: items per benchmark, drawn with ``seed`` (None: all).
        seed: seed of the item and exemplar draws.
        n_shot: few-shot exemplars for math benchmarks.
        style: math prompt style.
        max_new_tokens: math generation budget.
        normalization: choice: ``"none"`` (lm-eval's ``acc``) or ``"chars"`` (``acc_norm``).
        batch_size: batch size.
        progress: show progress bars.

    Returns:
        An :class:`EvalResult` with one accuracy per benchmark and the settings used.
    """
    scores = []
    for name in benchmarks:
        score = score_benchmark(
            model,
            tokenizer,
            name,
            path=path,
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
