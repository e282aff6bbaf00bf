"""How a block's contribution to the residual changes when its input or its attention output changes.

Background. The exact last-position methods (path patching to the logits, sender → receiver
edges) follow a change ``δ`` of the residual at one position through the blocks above it.
With every attention head frozen, ``δ`` stays at that position and passes only through the
position-wise parts of a block, whose shape is a per-family fact
(:class:`~mathcircuits.models.families.BlockStructure`):

* an attention output change ``c`` (e.g. ``(z' − z) W_O`` of one head) reaches the residual
  through the post-attention norm ``P1`` where the family has one::

      Δ = P1(a + c) − P1(a)          (else Δ = c)

* the MLP then sees its input residual moved by ``δ``, and its contribution changes by::

      Δ = P2(M(N2(r + δ))) − P2(M(N2(r)))

Both are computed with the bridge's own modules, so they follow whatever the family computes.

Usage::

    delta = attn_change(model, structure, layer, pre, change)
    delta = delta + mlp_change(model, structure, layer, resid_mid, delta, mlp_out)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits.models import hooks
from mathcircuits.models.families import BlockStructure
from mathcircuits.models.hooked import HookedModel

__all__ = ["attn_change", "attn_pre_norm_name", "chunked", "mlp_change"]


def chunked(fn: Callable[[Tensor], Tensor], x: Tensor, chunk_rows: int) -> Tensor:
    """``fn`` applied to ``x`` in chunks of at most ``chunk_rows`` rows (bounds memory), concatenated."""
    if x.shape[0] <= chunk_rows:
        return fn(x)
    return torch.cat([fn(c) for c in x.split(chunk_rows)])


def attn_pre_norm_name(structure: BlockStructure, layer: int) -> str | None:
    """Hook of the attention output before the post-attention norm (``None`` without one).

    Args:
        structure: the model's block structure.
        layer: the block.

    Returns:
        The hook name (e.g. ``blocks.3.ln1_post.hook_in``), or ``None`` when the family has no such norm.
    """
    return None if structure.attn_out_norm is None else hooks.sub(layer, f"{structure.attn_out_norm}.hook_in")


def attn_change(
    model: HookedModel,
    structure: BlockStructure,
    layer: int,
    pre: Float[Tensor, "rows d_model"] | None,
    change: Float[Tensor, "rows d_model"],
) -> Float[Tensor, "rows d_model"]:
    """Change of the residual when attention's output (before any output norm) changes by ``change``.

    Args:
        model: the hooked model.
        structure: its block structure.
        layer: the block.
        pre: the reference attention output before its output norm (``None`` when the family has none).
        change: the change of that output, e.g. ``(z' − z) W_O`` of one head.

    Returns:
        ``P(pre + change) − P(pre)`` for families with a post-attention norm ``P``, else ``change``.
    """
    if structure.attn_out_norm is None:
        return change
    norm = getattr(model.bridge.blocks[layer], structure.attn_out_norm)
    return norm(pre + change) - norm(pre)


def mlp_change(
    model: HookedModel,
    structure: BlockStructure,
    layer: int,
    base: Float[Tensor, "rows d_model"],
    delta: Float[Tensor, "rows d_model"],
    mlp_out: Float[Tensor, "rows d_model"],
    chunk_rows: int = 8192,
) -> Float[Tensor, "rows d_model"]:
    """How much the MLP block's contribution to the residual changes when its input residual moves by ``delta``.

    Args:
        model: the hooked model.
        structure: its block structure.
        layer: the block.
        base: the reference residual the MLP reads (``resid_mid``, or ``resid_pre`` in parallel blocks).
        delta: the change of that residual.
        mlp_out: the reference contribution (``hook_mlp_out``, after the output norm if any).
        chunk_rows: rows per MLP call, to bound memory.

    Returns:
        ``P2(M(N2(base + delta))) − mlp_out`` (without the norms the family does not have).
    """
    block = model.bridge.blocks[layer]
    in_norm = getattr(block, structure.mlp_in_norm) if structure.mlp_in_norm else None
    out_norm = getattr(block, structure.mlp_out_norm) if structure.mlp_out_norm else None

    def run(x: Tensor) -> Tensor:
        y = block.mlp(in_norm(x) if in_norm is not None else x)
        return out_norm(y) if out_norm is not None else y

    return chunked(run, base + delta, chunk_rows) - mlp_out
