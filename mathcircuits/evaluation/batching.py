"""Batching helpers shared by generation and log-likelihood scoring: left padding and model limits.

Left padding keeps every row's last real token at the last position, so a causal LM's next-token logits
for all rows sit in one column; the attention mask hides the padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from mathcircuits._errors import FixableValueError

__all__: list[str] = []


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter (where inputs must go)."""
    return next(model.parameters()).device


def max_positions(model: torch.nn.Module) -> int | None:
    """The model's context length (``max_position_embeddings`` or ``n_positions``), or None if unknown."""
    cfg = getattr(model, "config", None)
    return getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)


def pad_token_id(tokenizer: Any) -> int:
    """The tokenizer's pad id, else its EOS id.

    ValueError when it has neither.
    """
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise FixableValueError(
            "the tokenizer has neither a pad nor an EOS token. ", "set tokenizer.pad_token before scoring."
        )
    return int(pad)


def left_pad(
    seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> tuple[Int[Tensor, "batch seq"], Int[Tensor, "batch seq"]]:
    """Token id lists as one left-padded batch.

    ``(input_ids, attention_mask)``, mask 1 on real tokens; an empty row stays all padding.
    """
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long, device="cpu")
    mask = torch.zeros((len(seqs), width), dtype=torch.long, device="cpu")
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, width - len(s) :] = torch.tensor(list(s), dtype=torch.long, device="cpu")
            mask[i, width - len(s) :] = 1
    return ids.to(device), mask.to(device)


def common_prefix_length(seqs: Sequence[Sequence[int]]) -> int:
    """The length of the longest token prefix all of ``seqs`` share, leaving at least one token of each outside.

    Computed on token ids, not text: a shared text prefix whose last word the tokenizer merges with
    what follows differently per prompt shares only the tokens before that word.
    """
    if not seqs or min(len(s) for s in seqs) == 0:
        raise ValueError("common_prefix_length needs at least one row and no empty row; drop empty prompts first.")
    first = seqs[0]
    limit = min(len(s) for s in seqs) - 1  # every row keeps >= 1 token to run after the prefix
    n = 0
    while n < limit and all(s[n] == first[n] for s in seqs):
        n += 1
    return n
