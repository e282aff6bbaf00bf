"""SFT examples: prompt tokens + target tokens, with the loss on the target only (``labels`` -100 on the prompt).

* **Arithmetic pairs** from :func:`mathcircuits.data.generate_pairs`: the pair's own token ids are reused, so the
  tokenization is the one the circuits were found with.
* **Word problems** in the LLM-Adapters format (AddSub, SingleEq, SVAMP, GSM8K ``train.json``). The prompt is
  ``"Question: {question}\\nAnswer:"`` (the "plain" prompt of :mod:`mathcircuits.evaluation`); the target is the
  data set's rationale (default, as LLM-Adapters and the paper; model-written and noisy, e.g. AddSub's may compute
  another number than the gold answer) or ``" The answer is N."`` with the gold number. It is tokenized apart
  from the prompt, as a model meets it when it generates after the prompt.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import datasets

from mathcircuits._errors import FixableValueError
from mathcircuits.data import PairSet
from mathcircuits.data.benchmark_files import record_question
from mathcircuits.data.tokenizer_id import Tokenizer

__all__ = [
    "build_sft_dataset",
]

log = logging.getLogger(__name__)

DEFAULT_PROMPT = "Question: {question}\nAnswer:"


def format_gold(answer: str | float) -> str:
    """``"64013.0"`` → ``"64013"``; ``"9.80"`` → ``"9.8"``; other strings unchanged.

    Commas are ignored when parsing; at most 6 decimals; non-numeric strings are stripped.
    """
    text = str(answer).strip()
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return text
    if value == int(value):
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _clean_rationale(text: str) -> str:
    return re.sub(r"^\s*A:\s*", "", text.strip())


def build_sft_dataset(
    tokenizer: Tokenizer,
    records: Any,
    target: Literal["rationale", "answer"] = "rationale",
    prompt_template: str = DEFAULT_PROMPT,
    add_eos: bool | None = None,
    max_length: int = 512,
):
    """A ``datasets.Dataset`` with ``input_ids`` and ``labels`` (``-100`` outside the target).

    ``records`` are arithmetic pairs (``tokens``, ``answer_tokens``) or word-problem records (``instruction``,
    ``output``, ``answer``; :func:`mathcircuits.data.benchmark_files.read_word_problems`). ``target`` and
    ``prompt_template`` apply to
    word problems. ``add_eos`` None: False for arithmetic pairs (their few-shot format continues with a separator)
    and True for word problems. Examples longer than ``max_length`` tokens (prompt plus target) are dropped and
    logged; refuses when every one is.
    """

    arithmetic = isinstance(records, PairSet)
    rows = records if arithmetic or isinstance(records, datasets.Dataset) else list(records)
    if len(rows) == 0:
        raise FixableValueError(
            "build_sft_dataset got no records. ", "pass generate_pairs(...) output or read_word_problems(...)."
        )
    columns = set() if arithmetic else set(rows.column_names) if isinstance(rows, datasets.Dataset) else set(rows[0])
    if target not in ("rationale", "answer"):
        raise FixableValueError(f"target={target!r} is unknown. ", "use 'rationale' or 'answer'.")
    out: dict[str, list[list[int]]] = {"input_ids": [], "labels": []}
    eos = tokenizer.eos_token_id
    if arithmetic or {"tokens", "answer_tokens"} <= columns:
        use_eos = bool(add_eos) if add_eos is not None else False
        pairs: Iterable[tuple[Sequence[int], Sequence[int]]] = (
            zip(records.tokens, records.answer_tokens)
            if arithmetic
            else zip(rows["tokens"], rows["answer_tokens"])
            if isinstance(rows, datasets.Dataset)
            else ((r["tokens"], r["answer_tokens"]) for r in rows)
        )
    elif {"instruction", "answer"} <= columns:
        use_eos = bool(add_eos) if add_eos is not None else True

        def encode():
            for r in rows:
                prompt = prompt_template.format(question=record_question(r))
                gold = f"The answer is {format_gold(r['answer'])}."
                text = " " + (_clean_rationale(r["output"]) if target == "rationale" else gold)
                yield (
                    tokenizer(prompt, add_special_tokens=False)["input_ids"],
                    tokenizer(text, add_special_tokens=False)["input_ids"],
                )

        pairs = encode()
    else:
        raise FixableValueError(
            f"records have columns {sorted(columns)}; expected arithmetic pairs (tokens, answer_tokens) "
            "or word problems (instruction, output, answer). ",
            "pass generate_pairs(...) output or read_word_problems(...).",
        )
    dropped = 0
    for prompt_ids, target_ids in pairs:
        target_ids = list(target_ids) + ([eos] if use_eos and eos is not None else [])
        ids = list(prompt_ids) + target_ids
        if len(ids) > max_length:
            dropped += 1
            continue
        out["input_ids"].append(ids)
        out["labels"].append([-100] * len(prompt_ids) + target_ids)
    if dropped:
        log.info("build_sft_dataset dropped %d examples longer than %d tokens", dropped, max_length)
    if not out["input_ids"]:
        raise FixableValueError(f"every example is longer than max_length={max_length} tokens. ", "raise max_length.")
    return datasets.Dataset.from_dict(out)
