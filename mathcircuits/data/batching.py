"""Equal-length batches of dataset rows: the one batching helper of the toolkit.

Prompts of a pair set have a few distinct token lengths. Grouping rows by
length avoids padding, so position ``-1`` is every row's last token, which the
patching methods and the analyses rely on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from mathcircuits._errors import FixableKeyError, FixableValueError

__all__: list[str] = []


def length_groups(lengths: list[int], batch_size: int, keys: list[Any] | None = None) -> list[list[int]]:
    """Indices grouped by equal length (and equal key), split into batches (so no batch needs padding).

    ``keys`` is an optional second grouping key per item, e.g. the template, so a batch shares its few-shot
    prefix (which a prefix-cached forward runs once). Shortest lengths first.
    """
    by_len: dict[tuple[int, str], list[int]] = defaultdict(list)
    for i, n in enumerate(lengths):
        by_len[(n, "" if keys is None else str(keys[i]))].append(i)
    out = []
    for n in sorted(by_len):
        idx = by_len[n]
        out.extend(idx[j : j + batch_size] for j in range(0, len(idx), batch_size))
    return out


def padded_groups(lengths: list[int], batch_size: int, keys: list[Any] | None = None) -> list[list[int]]:
    """Indices grouped by key only (lengths may differ), sorted by length inside a key, split into batches.

    For right-padded batches of a causal LM: a row's real tokens come first and attend only to earlier
    positions, so the padding after them changes none of their logits and needs no attention mask.
    """
    by_key: dict[str, list[int]] = defaultdict(list)
    for i in range(len(lengths)):
        by_key["" if keys is None else str(keys[i])].append(i)
    out = []
    for k in sorted(by_key):
        idx = sorted(by_key[k], key=lambda i: lengths[i])
        out.extend(idx[j : j + batch_size] for j in range(0, len(idx), batch_size))
    return out


def iter_batches(
    columns: Mapping[str, Sequence[Any]],
    batch_size: int,
    device: torch.device | str = "cpu",
    length_of: str = "tokens",
    group_by: str | None = None,
) -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
    """Yield ``(row indices, {column: tensor})`` for groups of rows whose ``length_of`` column has equal length.

    ``columns`` are equal-length lists (of token lists or scalars); ``group_by`` names a column that also groups
    the rows when present (e.g. ``"template_id"``, so a batch shares its few-shot prefix) and becomes no tensor.
    """
    if length_of not in columns:
        raise FixableKeyError(
            f"iter_batches groups by column {length_of!r}, which is not among {sorted(columns)}. ", "pass that column."
        )
    if batch_size < 1:
        raise FixableValueError(f"batch_size is {batch_size}. ", "use a positive batch size.")
    keys = list(columns[group_by]) if group_by is not None and group_by in columns else None
    tensors = {name: col for name, col in columns.items() if name != group_by}
    for idx in length_groups([len(t) for t in columns[length_of]], batch_size, keys):
        yield idx, {name: torch.tensor([col[i] for i in idx], device=device) for name, col in tensors.items()}
