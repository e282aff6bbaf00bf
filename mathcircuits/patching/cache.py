"""The two forward passes of exact path patching: reference and counterfactual activations at the last position.

:func:`last_position_caches` runs the reference prompts and the counterfactual prompts once
each (their shared few-shot prefix once for both, exact) and keeps, per layer, what the
last-position chain of :mod:`mathcircuits.patching.exact` reads: ``hook_z``,
``hook_mlp_out``, the residual the MLP reads and (with post-attention norms) the attention
output before that norm, plus the last block's ``hook_resid_post``.

Usage::

    cache = last_position_caches(model, batch.tokens, batch.cf_tokens)
    clean = cache.clean(batch.answer, need_probs=False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jaxtyping import Float, Int
from torch import Tensor

from mathcircuits.models import hooks
from mathcircuits.models.capture import capture
from mathcircuits.models.changes import attn_pre_norm_name
from mathcircuits.models.families import BlockStructure, block_structure
from mathcircuits.models.readout import Readout

if TYPE_CHECKING:
    from mathcircuits.models import HookedModel

__all__ = ["LastPositionCache", "last_position_caches"]


@dataclass(frozen=True)
class LastPositionCache:
    """Reference and counterfactual activations at the patched position, keyed by hook name.

    ``ref`` holds, per layer, ``hook_z``, ``hook_mlp_out``, the residual the MLP
    reads and (with post-attention norms) the attention output before that norm,
    plus the last block's ``hook_resid_post``; ``cf`` holds ``hook_z`` and
    ``hook_mlp_out``. ``logits`` are the reference run's logits at the position.
    """

    logits: Float[Tensor, "batch vocab"]
    ref: dict[str, Tensor]
    cf: dict[str, Tensor]
    structure: BlockStructure

    def clean(self, answer: Int[Tensor, " batch"], need_probs: bool) -> Readout:
        """The unpatched readout of each pair (soft cap already applied by the model)."""
        return Readout.from_logits(self.logits, answer, need_probs)


def last_position_caches(
    model: HookedModel,
    tokens: Int[Tensor, "batch seq"],
    cf_tokens: Int[Tensor, "batch seq"],
    position: int = -1,
    structure: BlockStructure | None = None,
    share_prefix: bool = True,
) -> LastPositionCache:
    """The two forward passes of the method: reference and counterfactual activations at ``position``.

    Args:
        model: the hooked model.
        tokens: reference prompts.
        cf_tokens: counterfactual prompts, token-aligned with ``tokens``.
        position: the patched position.
        structure: the model's block structure (looked up when not given).
        share_prefix: run the prefix that all reference and counterfactual prompts share once
            (exact; ``False`` runs the two plain forwards, for checking).

    Returns:
        A :class:`LastPositionCache`.
    """
    structure = structure or block_structure(model)
    n_layers = model.spec.n_layers
    names = [hooks.resid_post(n_layers - 1)]
    for layer in range(n_layers):
        names += [hooks.z(layer), hooks.mlp_out(layer), hooks.sub(layer, structure.mlp_reads)]
        pre = attn_pre_norm_name(structure, layer)
        if pre is not None:
            names.append(pre)
    # reference and counterfactual prompts differ only in the query: one clean prefix cache serves both
    caches: dict[tuple[int, ...], Any] | None = {} if share_prefix and position == -1 else None
    logits, ref = capture(model.bridge, tokens, names, position, caches)
    cf_names = [n for layer in range(n_layers) for n in (hooks.z(layer), hooks.mlp_out(layer))]
    _, cf = capture(model.bridge, cf_tokens, cf_names, position, caches)
    return LastPositionCache(logits=logits, ref=ref, cf=cf, structure=structure)
