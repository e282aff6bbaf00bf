"""Score any HF causal LM on math word problems by generation, and the per-item result of any benchmark.

lm-eval lacks tasks for AddSub, SingleEq and SVAMP; we score them as LLM-Adapters does: greedy chain of
thought from a zero- or few-shot prompt (exemplars from the train split, each ending "The answer is N."),
the number read by :func:`~mathcircuits.evaluation.extract.extract_number`, a 1e-3 tolerance.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd
import torch

from mathcircuits._io import SavedResult
from mathcircuits.evaluation.extract import answers_match, extract_number
from mathcircuits.evaluation.generation import DEFAULT_STOP, generate_greedy
from mathcircuits.evaluation.items import BenchmarkItem
from mathcircuits.evaluation.prompts import PromptStyle, math_prompt

__all__ = [
    "BenchmarkScore",
    "evaluate_math",
]

log = logging.getLogger(__name__)

Normalization = Literal["none", "chars"]  # lm-eval's acc and acc_norm


@dataclass(frozen=True)
class ScoreSettings:
    """How one benchmark was scored. Direct math scoring fills the prompt fields; lm-evaluation-harness the
    ``harness`` fields (``"lm-eval"``, with its ``lm_eval_version``, ``task`` and ``metric``); a field that does not
    apply is ``None``. ``n_left_out`` counts items left out (e.g. too long).
    """

    style: str | None = None
    n_shot: int | None = None
    max_new_tokens: int | None = None
    tol: float | None = None
    stop_at_answer: bool | None = None
    n_left_out: int | None = None
    exemplar_uids: list[str] | None = None
    harness: str | None = None
    lm_eval_version: str | None = None
    task: str | None = None
    metric: str | None = None


@dataclass(frozen=True, repr=False)
class BenchmarkScore(SavedResult):
    """Per-item outcome of one benchmark run.

    ``predictions`` holds the generated text (math) or the chosen option (choice); ``extracted`` the number read
    from each generation (math, None if none); ``option_scores`` the per-option scores (choice).
    """

    STAGE = "evaluate"

    benchmark: str
    kind: str
    uids: tuple[str, ...]
    golds: tuple[str, ...]
    predictions: tuple[str, ...]
    correct: tuple[bool, ...]
    extracted: tuple[float | None, ...] = ()
    option_scores: tuple[tuple[float, ...], ...] = ()
    settings: ScoreSettings = ScoreSettings()

    @property
    def n(self) -> int:
        return len(self.correct)

    @property
    def accuracy(self) -> float:
        return sum(self.correct) / self.n if self.n else float("nan")

    def to_dataframe(self):
        """One row per item: uid, gold, prediction, correct (and extracted number / option scores)."""

        df = pd.DataFrame(
            {
                "benchmark": self.benchmark,
                "uid": list(self.uids),
                "gold": list(self.golds),
                "prediction": list(self.predictions),
                "correct": list(self.correct),
            }
        )
        if self.extracted:
            df["extracted"] = list(self.extracted)
        if self.option_scores:
            df["option_scores"] = [list(s) for s in self.option_scores]
        return df

    def summary_items(self) -> list[tuple[str, str]]:
        """Benchmark, kind, items and accuracy."""
        return [
            ("benchmark", self.benchmark),
            ("kind", self.kind),
            ("items", str(self.n)),
            ("accuracy", f"{self.accuracy:.1%}"),
        ]


def evaluate_math(
    model: torch.nn.Module,
    tokenizer: Any,
    items: Sequence[BenchmarkItem],
    exemplars: Sequence[BenchmarkItem] = (),
    style: PromptStyle = "plain",
    instruction: str | None = None,
    max_new_tokens: int = 256,
    batch_size: int = 8,
    stop: Sequence[str] = DEFAULT_STOP,
    stop_at_answer: bool = True,
    tol: float = 1e-3,
    progress: bool = True,
) -> BenchmarkScore:
    """Accuracy of greedy chain-of-thought answers on math items.

    Items whose question is one of the ``exemplars`` are left out (in the LLM-Adapters files every train
    record is also a test record). ``stop_at_answer`` stops after the first finished "The answer is N."
    sentence; ``tol`` is the absolute tolerance of :func:`~mathcircuits.evaluation.extract.answers_match`.
    """
    if not items:
        raise ValueError("evaluate_math got no items; load a benchmark first (load_benchmark(name, limit=...)).")
    if any(it.kind != "math" for it in items):
        raise ValueError("evaluate_math got multiple-choice items; score those with evaluate_lm_eval.")
    shot_questions = {ex.question for ex in exemplars}
    kept = [it for it in items if it.question not in shot_questions]
    if len(kept) < len(items):
        log.warning("left out %d item(s) that are also few-shot exemplars", len(items) - len(kept))
    if not kept:
        raise ValueError("every item is also a few-shot exemplar; draw exemplars from another split.")
    prompts = [math_prompt(it.question, exemplars, style, tokenizer, instruction) for it in kept]
    gens = generate_greedy(
        model,
        tokenizer,
        prompts,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        stop=stop,
        stop_at_answer=stop_at_answer,
        add_special_tokens=style != "chat",
        progress=progress,
        desc=f"{kept[0].benchmark} (math)",
    )
    values = [extract_number(g) for g in gens]
    correct = [answers_match(v, it.answer, tol) for v, it in zip(values, kept)]
    settings = ScoreSettings(
        style=style,
        n_shot=len(exemplars),
        max_new_tokens=max_new_tokens,
        tol=tol,
        stop_at_answer=stop_at_answer,
        n_left_out=len(items) - len(kept),
        exemplar_uids=[ex.uid for ex in exemplars],
    )
    return BenchmarkScore(
        benchmark=kept[0].benchmark,
        kind="math",
        uids=tuple(it.uid for it in kept),
        golds=tuple(it.answer for it in kept),
        predictions=tuple(gens),
        correct=tuple(correct),
        extracted=tuple(values),
        settings=settings,
    )
