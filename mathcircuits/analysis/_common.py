"""Helpers shared by the analyses: head lists, dataset columns (batching is ``mathcircuits.data.batching``)."""

from __future__ import annotations

from typing import Any, Sequence

import torch

__all__ = ["as_heads", "columns", "operation_rows", "spec_dict", "template_keys", "token_strings"]


def spec_dict(model: Any) -> dict[str, Any]:
    """The model's spec as a plain dict (for storing with a result).

    Args:
        model: a model with a ``spec`` (a spec with ``to_dict()``, or a mapping).

    Returns:
        The spec's fields as a dict.
    """
    spec = model.spec
    return spec.to_dict() if hasattr(spec, "to_dict") else dict(spec)


def as_heads(heads: Any, spec: Any) -> tuple[tuple[int, int], ...]:
    """Normalise ``heads`` (a KeyComponents, or ``[(layer, head), ...]``) and check each against the model.

    Args:
        heads: a ``KeyComponents`` (checked against the model) or an iterable of ``(layer, head)``.
        spec: the model's spec (``model.spec``), which checks each head is in range.

    Returns:
        The heads as a tuple of ``(layer, head)`` int pairs, in the given order.

    Raises:
        ValueError: if no heads are given or a head appears twice; the spec's error if a head is out of range.
    """
    if hasattr(heads, "heads") and hasattr(heads, "check_model"):
        heads.check_model(spec)
        heads = heads.heads
    out = tuple((int(layer), int(head)) for layer, head in heads)
    if not out:
        raise ValueError(
            "no heads given. Fix: pass KeyComponents with at least one head, or a list such as [(14, 2), (18, 5)]."
        )
    for layer, head in out:
        spec.check_head(layer, head)
    if len(set(out)) != len(out):
        raise ValueError(f"heads {out} contain duplicates. Fix: list each (layer, head) once.")
    return out


def columns(dataset: Any, names: Sequence[str]) -> dict[str, list[Any]]:
    """Columns of a ``datasets.Dataset`` (or a list of row dicts), with a teaching error for missing ones.

    Args:
        dataset: a ``datasets.Dataset`` or a list of row dicts.
        names: the column names to read.

    Returns:
        A dict from each name in ``names`` to that column's values as a list.

    Raises:
        ValueError: if a column is missing or the dataset is empty.
    """
    have = (
        dataset.column_names if hasattr(dataset, "column_names") else (list(dataset[0].keys()) if len(dataset) else [])
    )
    missing = [n for n in names if n not in have]
    if missing:
        raise ValueError(
            f"the dataset lacks columns {missing} (it has {sorted(have)}). "
            "Fix: build it with mathcircuits.data.generate_pairs, which records tokens and operand/operator positions."
        )
    if len(dataset) == 0:
        raise ValueError("the dataset is empty. Fix: generate pairs (and keep some correct ones) first.")
    if hasattr(dataset, "column_names"):
        return {n: list(dataset[n]) for n in names}
    return {n: [row[n] for row in dataset] for n in names}


def token_strings(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Readable text of each token (decoded one by one, so 'Ġ5' shows as ' 5').

    Args:
        tokenizer: the model's Hugging Face tokenizer.
        ids: token ids.

    Returns:
        The decoded text of each token, in order.
    """
    return [tokenizer.decode([int(i)]) for i in ids]


def operation_rows(operations: Sequence[str], operation: str | None) -> torch.Tensor:
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


def template_keys(dataset: Any) -> list[Any]:
    """Each row's ``template_id`` (all equal when the dataset has none): batches grouped by it share their prefix.

    Args:
        dataset: a ``datasets.Dataset`` or a list of row dicts.

    Returns:
        One template id per row (``0`` for every row when there is no ``template_id`` column).
    """
    if hasattr(dataset, "column_names"):
        return list(dataset["template_id"]) if "template_id" in dataset.column_names else [0] * len(dataset)
    return [row.get("template_id", 0) for row in dataset]
