"""The pair set: what every stage passes between ``generate_pairs`` and the analyses, with its one column check.

A *pair set* (:data:`PairSet`) is the ``datasets.Dataset`` that
:func:`~mathcircuits.data.generate_pairs` returns (and that ``score_pairs`` /
``filter_correct`` / ``correct_pairs`` keep): one row per reference/counterfactual
prompt pair, with

* ``tokens``, ``cf_tokens`` — the two prompts' token ids, of equal length (token-aligned);
* ``answer_token`` / ``answer_tokens`` — the answer's first token / all its tokens;
* ``n_tokens``, ``prefix_len``, ``pos_a``, ``pos_b``, ``pos_op``, ``pos_last`` — token positions;
* ``operation``, ``template_id``, ``pair_id``, ``prompt``, ``answer``, ``a``, ``b`` — what the pair is.

Every function that reads pairs states the columns it needs and calls
:func:`check_columns`, the one check: a missing column or an empty set is an error that
names the caller, the columns and the fix. :func:`pair_batches` groups pairs of equal
token length (and one template, so a batch shares its few-shot prefix) into
:class:`PairBatch` tensors, so position ``-1`` is every row's last token.

Usage::

    check_columns(pairs, ("tokens", "cf_tokens", "answer_token"), "path_patch")
    for batch in pair_batches(pairs, batch_size=16, device=model.device): ...
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import datasets
import torch
from jaxtyping import Int
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.data.batching import iter_batches
from mathcircuits.data.templates import Operation

__all__ = [
    "PairBatch",
    "PairSet",
    "check_columns",
    "check_token_aligned",
    "operation_rows",
    "pair_batches",
    "pair_columns",
    "pair_keys",
    "template_keys",
    "token_strings",
]

#: Prompt pairs from :func:`~mathcircuits.data.generate_pairs` (columns in the module docstring).
PairSet: TypeAlias = datasets.Dataset

_FIX = (
    "Fix: pass pairs built by mathcircuits.data.generate_pairs, which records the prompt tokens, "
    "their positions and the answer tokens."
)


def _column_names(pairs: PairSet | Sequence[Mapping[str, Any]]) -> list[str]:
    if isinstance(pairs, datasets.Dataset):
        return list(pairs.column_names)
    return list(pairs[0].keys()) if len(pairs) else []


def check_columns(pairs: PairSet | Sequence[Mapping[str, Any]], needed: Sequence[str], caller: str) -> None:
    """Refuse a pair set without the columns ``caller`` reads, or with no pair; the one column check.

    Args:
        pairs: a pair set (or a list of row dicts, which the analyses also take).
        needed: the columns ``caller`` reads.
        caller: the function's name, for the message.

    Returns:
        None; it only raises.

    Raises:
        ValueError: ``"<caller> got a dataset without the columns [...] (it has [...]). Fix: ..."`` or
            ``"<caller> got an empty dataset (0 pairs) ... Fix: ..."``.
    """
    have = _column_names(pairs)
    missing = [c for c in needed if c not in have]
    if missing:
        raise ValueError(f"{caller} got a dataset without the columns {missing} (it has {have}). {_FIX}")
    if len(pairs) == 0:
        raise FixableValueError(
            f"{caller} got an empty dataset (0 pairs), so there is nothing to score or average. ",
            "pass a dataset with pairs (e.g. the correct pairs of the identify stage); check filters upstream.",
        )


def pair_columns(
    pairs: PairSet | Sequence[Mapping[str, Any]], names: Sequence[str], caller: str
) -> dict[str, list[Any]]:
    """The columns ``names`` as lists, after :func:`check_columns`.

    Args:
        pairs: a pair set or a list of row dicts.
        names: the columns to read.
        caller: the function's name, for the error message.

    Returns:
        ``{name: that column's values as a list}``.
    """
    check_columns(pairs, names, caller)
    if isinstance(pairs, datasets.Dataset):
        return {n: list(pairs[n]) for n in names}
    return {n: [row[n] for row in pairs] for n in names}


def pair_keys(pairs: PairSet | Sequence[Mapping[str, Any]]) -> list[str]:
    """A short fingerprint of each pair (its prompt's and counterfactual's tokens), to tell the same pair again.

    ``pair_id`` only counts rows within one generation, so two draws share ids; the tokens do not lie.

    Args:
        pairs: a pair set (or row dicts) with ``tokens`` (and ``cf_tokens`` when present).

    Returns:
        One 16-hex-digit key per pair, in order; empty when the pairs have no ``tokens``.
    """
    have = _column_names(pairs)
    if "tokens" not in have:
        return []
    names = ["tokens", "cf_tokens"] if "cf_tokens" in have else ["tokens"]
    cols = pair_columns(pairs, names, "pair_keys") if len(pairs) else {n: [] for n in names}
    rows = zip(*(cols[n] for n in names))
    return [hashlib.blake2b(repr([list(map(int, c)) for c in row]).encode(), digest_size=8).hexdigest() for row in rows]


def check_token_aligned(pairs: PairSet, vocab_size: int) -> None:
    """Refuse pairs path patching cannot use: prompts of unequal token length, answers outside the vocabulary.

    Args:
        pairs: a pair set with ``tokens``, ``cf_tokens`` and ``answer_token`` (checked by :func:`check_columns`).
        vocab_size: the model's vocabulary size (``model.spec.vocab_size``).

    Returns:
        None; it only raises.

    Raises:
        ValueError: a column is missing, the set is empty, a pair's reference and counterfactual prompts
            differ in token length, or an answer token is outside the vocabulary.
    """
    check_columns(pairs, ("tokens", "cf_tokens", "answer_token"), "path patching")
    for i, (t, c) in enumerate(zip(pairs["tokens"], pairs["cf_tokens"])):
        if len(t) != len(c):
            raise FixableValueError(
                f"pair {i}: the reference prompt has {len(t)} tokens but the counterfactual has {len(c)}. "
                "Path patching needs token-aligned pairs. ",
                "regenerate with counterfactual words that tokenize like the operator.",
            )
    bad = [i for i, a in enumerate(pairs["answer_token"]) if not 0 <= a < vocab_size]
    if bad:
        raise FixableValueError(
            f"pairs {bad[:5]} have answer tokens outside the model's vocabulary ({vocab_size}). ",
            "generate the pairs with this model's tokenizer.",
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


def pair_batches(pairs: PairSet, batch_size: int, device: torch.device | str, answers: bool = False) -> list[PairBatch]:
    """Batches of pairs with equal token length (no padding, so the last position is the same for all).

    Args:
        pairs: a pair set with ``tokens``, ``cf_tokens`` and ``answer_token`` (and optionally
            ``template_id``, so that a batch shares one template).
        batch_size: at most this many pairs per batch.
        device: where the batch tensors go.
        answers: also batch every answer token (``answer_tokens``; a batch then has one answer length).

    Returns:
        A list of :class:`PairBatch`: row indices, ``tokens`` and ``cf_tokens`` of shape ``[batch, seq]`` and
        ``answer`` of shape ``[batch]`` (and ``answers`` ``[batch, n_answer]``).
    """
    cols = {"tokens": pairs["tokens"], "cf_tokens": pairs["cf_tokens"], "answer": pairs["answer_token"]}
    keys = list(pairs["template_id"]) if "template_id" in pairs.column_names else [0] * len(pairs)
    if answers:
        check_columns(pairs, ("answer_tokens",), "teacher-forced path patching")
        cols["answers"] = pairs["answer_tokens"]
        keys = [f"{k}|{len(a)}" for k, a in zip(keys, cols["answers"])]
    cols["group"] = keys  # one template per batch: its few-shot prefix runs once
    return [PairBatch(idx=idx, **b) for idx, b in iter_batches(cols, batch_size, device, group_by="group")]


def template_keys(pairs: PairSet | Sequence[Mapping[str, Any]]) -> list[Any]:
    """Each row's ``template_id`` (all equal when there is none): batches grouped by it share their prefix.

    Args:
        pairs: a pair set or a list of row dicts.

    Returns:
        One template id per row (``0`` for every row when there is no ``template_id`` column).
    """
    if isinstance(pairs, datasets.Dataset):
        return list(pairs["template_id"]) if "template_id" in pairs.column_names else [0] * len(pairs)
    return [row.get("template_id", 0) for row in pairs]


def operation_rows(operations: Sequence[str], operation: Operation | None) -> Int[Tensor, " rows"]:
    """Indices of the pairs of ``operation`` (all pairs when None); a clear error if there are none.

    Args:
        operations: the operation of each pair.
        operation: the operation to select, or None for all pairs.

    Returns:
        1-D long tensor of the selected pair indices.

    Raises:
        KeyError: if no pair has ``operation``.
    """
    if operation is None:
        return torch.arange(len(operations))
    idx = [i for i, op in enumerate(operations) if op == operation]
    if not idx:
        raise KeyError(f"no pair of operation {operation!r}; this result has {list(dict.fromkeys(operations))}.")
    return torch.tensor(idx)


def token_strings(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Readable text of each token (decoded one by one, so 'Ġ5' shows as ' 5').

    Args:
        tokenizer: the model's Hugging Face tokenizer.
        ids: token ids.

    Returns:
        The decoded text of each token, in order.
    """
    return [tokenizer.decode([int(i)]) for i in ids]
