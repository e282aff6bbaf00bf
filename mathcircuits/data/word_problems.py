"""Real word problems as direct-answer prompts (for transfer checks of the knockout).

Zhang et al. (ICML 2024, Sec. 3.3) ask whether the key heads found on templates also matter on real word
problems. Each problem of an LLM-Adapters file becomes ``"Question: …\\nAnswer: The answer is"`` followed
by the integer answer, so the teacher-forced correctness check of templates applies. Only problems with a
non-negative integer answer are kept.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

from mathcircuits._errors import FixableValueError
from mathcircuits.data.benchmark_files import read_word_problems, record_question
from mathcircuits.data.pairset import PairSet
from mathcircuits.data.render import answer_spacing, prompt_start
from mathcircuits.data.tokenizer_id import Tokenizer, tokenizer_fingerprint

__all__ = ["word_problem_dataset"]


def _integer_answer(answer: Any) -> str | None:
    """``"12"`` / ``"12.0"`` / ``"1,200"`` → the integer as text; None for negative or fractional answers."""
    try:
        value = float(str(answer).replace(",", ""))
    except ValueError:
        return None
    return str(int(value)) if value >= 0 and value == int(value) else None


def word_problem_dataset(
    tokenizer: Tokenizer,
    path: str | os.PathLike,
    limit: int | None = 64,
    seed: int = 0,
    fewshot: int = 0,
) -> PairSet:
    """Word problems of one benchmark file as prompts with their answer tokens.

    ``limit`` problems (None: all) are kept after a shuffle seeded by ``seed``; ``fewshot`` solved problems of the
    shuffled file (never also questions) precede each question. ``operation`` is ``"word_problem"`` and
    ``template_id`` the benchmark folder.
    """

    path = Path(path)
    usable = []
    for r in read_word_problems(path):
        answer = _integer_answer(r["answer"])
        if answer is not None:
            usable.append((record_question(r), answer))
    random.Random(seed).shuffle(usable)
    shots, items = usable[:fewshot], usable[fewshot:]
    if limit is not None:
        items = items[:limit]
    spacing = answer_spacing(tokenizer)
    prefix = prompt_start(tokenizer) + "".join(f"Question: {q}\nAnswer: The answer is {a}\n\n" for q, a in shots)
    rows = []
    for q, a in items:
        prompt = prefix + f"Question: {q}\nAnswer: The answer is" + (" " if spacing == "prompt" else "")
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        full = tokenizer(prompt + (a if spacing == "prompt" else " " + a), add_special_tokens=False)["input_ids"]
        if full[: len(ids)] != ids:
            continue
        rows.append(
            {
                "prompt": prompt,
                "answer": a,
                "tokens": ids,
                "answer_tokens": full[len(ids) :],
                "n_tokens": len(ids),
                "operation": "word_problem",
                "template_id": path.parent.name,
            }
        )
    if not rows:
        raise FixableValueError(
            f"{path}: no usable problem (a non-negative integer answer that tokenizes apart from the prompt). ",
            "pass a math word-problem file such as SVAMP/test.json.",
        )
    fp = tokenizer_fingerprint(tokenizer)  # the pairs carry their tokenizer (PairSet.require_model)
    return PairSet.from_rows([{**row, "tokenizer": fp} for row in rows])
