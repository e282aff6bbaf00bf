"""SFT examples: prompt tokens + target tokens, with the loss on the target only.

Two sources, both turned into ``input_ids`` and ``labels`` (``-100`` on the
prompt, so the loss covers only the answer):

* **arithmetic pairs** from :func:`mathcircuits.data.generate_pairs` (columns
  ``tokens`` and ``answer_tokens``): the model reads the prompt (e.g.
  ``"3 + 5 = "``, possibly after few-shot examples) and learns the answer
  digits. Reusing the pair's own token ids keeps tokenization identical to the
  one the circuits were found with.
* **word problems** in the LLM-Adapters format (AddSub, SingleEq, SVAMP,
  GSM8K ``train.json``: ``instruction``, ``output``, ``answer``). The prompt is
  ``"Question: {question}\\nAnswer:"`` — the "plain" prompt of
  :mod:`mathcircuits.evaluation` — and the target is

  - ``"rationale"`` (default): the data set's chain of thought, which ends with
    "The answer is N." (as LLM-Adapters and the paper fine-tune on rationales).
    These rationales are model-written and noisy (e.g. AddSub's may compute
    another number than the gold answer);
  - ``"answer"``: ``" The answer is N."`` with the gold number, short and clean.

  The target is tokenized apart from the prompt, as a model meets it when it
  generates after the prompt; an EOS token ends it (``add_eos``).
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

__all__ = ["DEFAULT_PROMPT", "build_sft_dataset", "format_gold"]

log = logging.getLogger(__name__)

DEFAULT_PROMPT = "Question: {question}\nAnswer:"


def format_gold(answer: str | float) -> str:
    """``"64013.0"`` → ``"64013"``; ``"9.80"`` → ``"9.8"``; other strings unchanged.

    Args:
        answer: a gold answer, as a string or number (commas are ignored when parsing).

    Returns:
        The answer as text: integers without a decimal part, other numbers without trailing zeros (at most
        6 decimals), and non-numeric strings stripped but otherwise unchanged.
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
    tokenizer,
    records: Any,
    target: Literal["rationale", "answer"] = "rationale",
    prompt_template: str = DEFAULT_PROMPT,
    add_eos: bool | None = None,
    max_length: int = 512,
):
    """A ``datasets.Dataset`` with ``input_ids`` and ``labels`` (``-100`` outside the target).

    ``records`` is a pairs dataset from ``generate_pairs`` (uses ``tokens`` and
    ``answer_tokens``) or a list of word-problem records (see
    :func:`mathcircuits.data.read_word_problems`). ``add_eos`` defaults to False for arithmetic
    pairs (their few-shot format continues with a separator, not EOS) and True
    for word problems. Examples longer than ``max_length`` tokens are dropped
    (logged).

    Args:
        tokenizer: the model's Hugging Face tokenizer.
        records: arithmetic pairs (``tokens``, ``answer_tokens``) or word-problem records
            (``instruction``, ``output``, ``answer``).
        target: word problems: train on the rationale (``"rationale"``) or on ``"The answer is X."``
            (``"answer"``).
        prompt_template: word problems: the prompt, with a ``{question}`` placeholder.
        add_eos: append the EOS token to each target (None: the default above).
        max_length: longest example kept, in tokens (prompt plus target).

    Returns:
        A ``datasets.Dataset`` with ``input_ids`` and ``labels`` (token id lists; labels are ``-100`` on the
        prompt).

    Raises:
        ValueError: if there are no records, ``target`` is unknown, the records have neither format's columns,
            or every example is longer than ``max_length``.
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
