"""How a block's contribution to the residual changes when its input or its attention output changes.

The exact last-position methods (path patching to the logits, sender → receiver edges) follow a change ``δ`` of
the residual at one position through the blocks above it. With every attention head frozen, ``δ`` stays at that
position and passes only through a block's position-wise parts, whose shape is a per-family fact
(:class:`~mathcircuits.models.families.BlockStructure`):

* an attention output change ``c`` (e.g. ``(z' − z) W_O`` of one head) reaches the residual through the
  post-attention norm ``P1`` where the family has one: ``Δ = P1(a + c) − P1(a)`` (else ``Δ = c``);
* the MLP sees its input moved by ``δ``: ``Δ = P2(M(N2(r + δ))) − P2(M(N2(r)))``.

Both are computed with the bridge's own modules, so they follow whatever the family computes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits.models import hooks
from mathcircuits.models.families import BlockStructure
from mathcircuits.models.hooked import HookedModel

__all__: list[str] = []


def chunked(fn: Callable[[Tensor], Tensor], x: Tensor, chunk_rows: int) -> Tensor:
    """``fn`` applied to ``x`` in chunks of at most ``chunk_rows`` rows, concatenated."""
    if x.shape[0] <= chunk_rows:
        return fn(x)
    return torch.cat([fn(c) for c in x.split(chunk_rows)])


def attn_pre_norm_name(structure: BlockStructure, layer: int) -> str | None:
    """Hook of the attention output before the post-attention norm (``blocks.3.ln1_post.hook_in``), or None."""
    return None if structure.attn_out_norm is None else hooks.sub(layer, f"{structure.attn_out_norm}.hook_in")


def attn_change(
    model: HookedModel,
    structure: BlockStructure,
    layer: int,
    pre: Float[Tensor, "rows d_model"] | None,
    change: Float[Tensor, "rows d_model"],
) -> Float[Tensor, "rows d_model"]:
    """Change of the residual when attention's output (before any output norm) changes by ``change``.

    ``pre`` is the reference attention output before its output norm (``None`` when the family has none).
    Returns ``P(pre + change) − P(pre)`` for families with a post-attention norm ``P``, else ``change``.
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
    """How much the MLP block's contribution changes when its input residual ``base`` moves by ``delta``.

    ``base`` is ``resid_mid`` (``resid_pre`` in parallel blocks), ``mlp_out`` the reference ``hook_mlp_out``;
    returns ``P2(M(N2(base + delta))) − mlp_out`` without the norms the family lacks.
    """
    block = model.bridge.blocks[layer]
    in_norm = getattr(block, structure.mlp_in_norm) if structure.mlp_in_norm else None
    out_norm = getattr(block, structure.mlp_out_norm) if structure.mlp_out_norm else None

    def run(x: Tensor) -> Tensor:
        y = block.mlp(in_norm(x) if in_norm is not None else x)
        return out_norm(y) if out_norm is not None else y

    return chunked(run, base + delta, chunk_rows) - mlp_out
