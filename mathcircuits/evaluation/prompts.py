"""Prompts for math benchmarks: few-shot exemplars and the three prompt styles.

Zhang et al. (ICML 2024, Sec. 5) follow LLM-Adapters, which prompts with the
Alpaca template; base models do better with a plain ``Question: ... Answer:``
format and instruction-tuned ones with their chat template. Exemplars come from
the train split and end with their rationale ("... The answer is N.").
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Literal

from mathcircuits.evaluation.extract import answers_match
from mathcircuits.evaluation.items import BenchmarkItem

__all__: list[str] = []

PromptStyle = Literal["plain", "alpaca", "chat"]

ALPACA_TEMPLATE = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{question}\n\n### Response:\n"
)
MATH_INSTRUCTION = "Solve the problem step by step and end with 'The answer is <number>.'"
CHOICE_TEMPLATE = "Question: {question}\nAnswer:"


def select_exemplars(train: Sequence[BenchmarkItem], k: int = 4, seed: int = 0) -> list[BenchmarkItem]:
    """Few-shot exemplars from a train split, among items whose rationale reaches the gold answer.

    The LLM-Adapters rationales are model-written and noisy; an exemplar whose rationale ends
    in another number would teach the wrong answer, so those are skipped (ValueError when fewer
    than ``k`` remain).
    """
    good = [it for it in train if it.rationale and answers_match(it.rationale, it.answer)]
    if len(good) < k:
        raise ValueError(
            f"only {len(good)} of {len(train)} train items have a rationale that reaches the gold answer, "
            f"fewer than the {k} exemplars asked for; lower n_shot or pass exemplars yourself."
        )
    return random.Random(seed).sample(good, k)


def _shot_answer(item: BenchmarkItem) -> str:
    text = item.rationale.strip() or f"The answer is {item.answer}."
    return text


def math_prompt(
    question: str,
    exemplars: Sequence[BenchmarkItem] = (),
    style: PromptStyle = "plain",
    tokenizer: Any = None,
    instruction: str | None = None,
) -> str:
    """The prompt text for one math question.

    Chat prompts already hold their special tokens. Styles:
    ``"plain"``: ``"Question: ...\\nAnswer: <rationale>\\n\\n"`` per exemplar, then ``"Question: q\\nAnswer:"``;
    ``"alpaca"``: the LLM-Adapters template (exemplars as earlier instruction/response blocks);
    ``"chat"``: the tokenizer's chat template with exemplars as earlier turns, ``instruction`` (default
    :data:`MATH_INSTRUCTION`) appended to each user turn.
    """
    if style == "plain":
        shots = "".join(f"Question: {ex.question}\nAnswer: {_shot_answer(ex)}\n\n" for ex in exemplars)
        return f"{shots}Question: {question}\nAnswer:"
    if style == "alpaca":
        shots = "".join(ALPACA_TEMPLATE.format(question=ex.question) + _shot_answer(ex) + "\n\n" for ex in exemplars)
        return shots + ALPACA_TEMPLATE.format(question=question)
    if style == "chat":
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "style='chat' needs a tokenizer with a chat template (tokenizer.chat_template is empty or no "
                "tokenizer was given); pass the model's tokenizer, or use style='plain' for base models."
            )
        suffix = f"\n{instruction if instruction is not None else MATH_INSTRUCTION}".rstrip()
        messages: list[dict[str, str]] = []
        for ex in exemplars:
            messages += [
                {"role": "user", "content": ex.question + suffix},
                {"role": "assistant", "content": _shot_answer(ex)},
            ]
        messages.append({"role": "user", "content": question + suffix})
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    raise ValueError(f"unknown prompt style {style!r}; use 'plain', 'alpaca' or 'chat'.")
