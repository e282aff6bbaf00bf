"""The columns of a pair set, their one check, and the tensors of a batch of pairs.

A :class:`~mathcircuits.data.PairSet` wraps a ``datasets.Dataset`` with one row per reference/counterfactual
prompt pair: ``tokens``, ``cf_tokens`` (token-aligned, equal length); ``answer_token`` / ``answer_tokens``
(the answer's first / all tokens); token positions ``n_tokens``, ``prefix_len``, ``pos_a``, ``pos_b``,
``pos_op``, ``pos_last``; and ``operation``, ``template_id``, ``pair_id``, ``prompt``, ``answer``, ``a``,
``b``. Only ``data/`` reads these columns by name, and :func:`check_columns` is the one check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import datasets
import torch
from jaxtyping import Int
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.data.templates import Operation

__all__ = [
    "PairBatch",
    "PairRow",
]


class PairRow(TypedDict, total=False):
    """One row of a pair set, as :func:`~mathcircuits.data.render.render_pair` builds it (``pair_id`` is added by
    ``generate_pairs``; the ``cf_*`` answer columns and ``counterfactual`` by an operand counterfactual)."""

    prompt: str
    cf_prompt: str
    answer: str
    answer_token: int
    answer_tokens: list[int]
    n_answer_tokens: int
    operation: Operation
    template_id: str
    template_set: str
    form: str
    a: int
    b: int
    cf_word: str
    words: dict[str, str] | list[str]  # the pool words filled in; [] for an operand swap (data.swaps)
    tokens: list[int]
    cf_tokens: list[int]
    n_tokens: int
    prefix_len: int
    pos_a: list[int]
    pos_b: list[int]
    pos_op: list[int]
    pos_last: int
    pair_id: int
    counterfactual: str
    cf_a: int
    cf_b: int
    cf_answer: str
    cf_answer_tokens: list[int]


_FIX = (
    "Fix: pass pairs built by mathcircuits.data.generate_pairs, which records the prompt tokens, "
    "their positions and the answer tokens."
)


def check_columns(pairs: datasets.Dataset, needed: Sequence[str], caller: str) -> None:
    """Refuse a pair set without the columns ``caller`` reads, or with no pair; the one column check.

    The ValueError names ``caller``, the missing and present columns, and the fix.
    """
    have = list(pairs.column_names)
    missing = [c for c in needed if c not in have]
    if missing:
        raise ValueError(f"{caller} got a dataset without the columns {missing} (it has {have}). {_FIX}")
    if len(pairs) == 0:
        raise FixableValueError(
            f"{caller} got an empty dataset (0 pairs), so there is nothing to score or average. ",
            "pass a dataset with pairs (e.g. the correct pairs of the identify stage); check filters upstream.",
        )


@dataclass(frozen=True)
class PairBatch:
    """Pairs of equal token length: reference and counterfactual tokens, the answer's first token.

    ``answers`` (when the batch was built with ``answers=True``) holds every answer token; the pairs of one
    batch then also have answers of equal length, so teacher forcing appends the same number of positions.
    """

    idx: list[int]
    tokens: Int[Tensor, "batch seq"]
    cf_tokens: Int[Tensor, "batch seq"]
    answer: Int[Tensor, " batch"]
    answers: Int[Tensor, "batch n_answer"] | None = None


def operation_rows(operations: Sequence[str], operation: Operation | None) -> Int[Tensor, " rows"]:
    """Indices of the pairs of ``operation`` (all pairs when None); a clear error if there are none.

    KeyError when no pair has ``operation``.
    """
    if operation is None:
        return torch.arange(len(operations))
    idx = [i for i, op in enumerate(operations) if op == operation]
    if not idx:
        raise KeyError(f"no pair of operation {operation!r}; this result has {list(dict.fromkeys(operations))}.")
    return torch.tensor(idx)


def token_strings(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Readable text of each token (decoded one by one, so 'Ġ5' shows as ' 5')."""
    return [tokenizer.decode([int(i)]) for i in ids]
