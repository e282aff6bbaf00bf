"""One batch of pairs cached for sender → receiver path patching, and what the methods share about a receiver.

:func:`pair_cache` runs the reference and the counterfactual prompts of a batch once each and keeps,
at every position, what both edge methods read (:class:`PairCache`); an :class:`EdgeBatch` is what they
return. :func:`receiver_slice`, :func:`put_receiver` and :func:`check_request` say how a receiver's
input is read, replaced and checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mathcircuits.circuit.components import Receiver, Sender
from mathcircuits.models import HookedModel, hooks
from mathcircuits.models.capture import capture
from mathcircuits.models.changes import attn_pre_norm_name
from mathcircuits.models.families import BlockStructure, block_structure
from mathcircuits.models.readout import Readout

__all__ = ["EdgeBatch", "PairCache", "check_request", "pair_cache", "put_receiver", "receiver_slice"]


@dataclass(frozen=True)
class PairCache:
    """One batch of equal-length pairs and its two cached runs (every position), shared by all receivers.

    ``ref`` holds per layer ``hook_z``, ``hook_mlp_out``, ``hook_resid_pre``, the residual the MLP reads,
    the attention output before a post-attention norm (where the family has one), ``hook_q/k/v`` and the
    MLP's input; ``cf`` holds ``hook_z`` and ``hook_mlp_out`` of the counterfactual prompts.
    """

    tokens: Int[Tensor, "batch seq"]
    cf_tokens: Int[Tensor, "batch seq"]
    answer: Int[Tensor, " batch"]
    ref: dict[str, Tensor]
    cf: dict[str, Tensor]
    clean: Readout
    structure: BlockStructure


@torch.no_grad()
def pair_cache(
    model: HookedModel,
    tokens: Int[Tensor, "batch seq"],
    cf_tokens: Int[Tensor, "batch seq"],
    answer: Int[Tensor, " batch"],
    need_probs: bool = False,
) -> PairCache:
    """The reference and counterfactual runs of one batch, cached at every position.

    Args:
        model: the hooked model.
        tokens: reference prompts.
        cf_tokens: token-aligned counterfactual prompts.
        answer: the answer's first token per pair.
        need_probs: also read out the clean answer probability (for ``prob_change``).

    Returns:
        A :class:`PairCache`.
    """
    if tokens.shape != cf_tokens.shape:
        raise ValueError(
            f"reference tokens {tuple(tokens.shape)} and counterfactual tokens {tuple(cf_tokens.shape)} differ in "
            "shape. Fix: pass token-aligned pairs of equal length (mathcircuits.data.generate_pairs)."
        )
    structure = block_structure(model)
    names = []
    for layer in range(model.spec.n_layers):
        names += [hooks.z(layer), hooks.mlp_out(layer), hooks.resid_pre(layer), hooks.sub(layer, structure.mlp_reads)]
        names += [hooks.sub(layer, f"attn.hook_{k}") for k in "qkv"] + [hooks.mlp_in(layer)]
        pre = attn_pre_norm_name(structure, layer)
        names += [pre] if pre is not None else []
    logits, ref = capture(model.bridge, tokens, sorted(set(names)), position=None)
    cf_names = [n for layer in range(model.spec.n_layers) for n in (hooks.z(layer), hooks.mlp_out(layer))]
    _, cf = capture(model.bridge, cf_tokens, cf_names, position=None)
    clean = Readout.from_logits(logits[:, -1], answer, need_probs)
    return PairCache(tokens, cf_tokens, answer, ref, cf, clean, structure)


@dataclass(frozen=True)
class EdgeBatch:
    """Per-pair effects of each sender on one receiver, for one batch of equal-length pairs."""

    effects: Float[Tensor, "batch sender"]
    clean_logit: Float[Tensor, " batch"]


def receiver_slice(receiver: Receiver, act: Tensor) -> Tensor:
    """The receiver's slice of its hook's activation ``[..., pos, (head|group), d]``."""
    return act if receiver.kind == "mlp" else act[..., receiver.index, :]


def put_receiver(receiver: Receiver, act: Tensor, value: Tensor, pos: Sequence[int]) -> Tensor:
    """A copy of the receiver's hook activation with its slice replaced by ``value`` at positions ``pos``."""
    act = act.clone()
    if receiver.kind == "mlp":
        act[:, pos] = value.to(act.dtype)
    else:
        act[:, pos, receiver.index] = value.to(act.dtype)
    return act


def check_request(
    model: HookedModel, receiver: Receiver, senders: Sequence[Sender], structure: BlockStructure
) -> Receiver:
    """The receiver, checked against the model; refused when it is the logits or a sender cannot reach it."""
    receiver = receiver.check(model.spec)
    if receiver.kind == "logits":
        raise ValueError(
            "the receiver is the logits, which mathcircuits.patching.path_patch already scans at the cost floor. "
            "Fix: use path_patch(model, dataset) for sender → logits, or a q/k/v/mlp receiver here."
        )
    for s in senders:
        s.check(model.spec)
        if not receiver.is_downstream_of(s, structure.parallel):
            raise ValueError(
                f"sender {s.name} lies at or after receiver {receiver.name}, so its output cannot reach it. "
                "Fix: use senders in earlier layers (upstream_senders(spec, receiver, parallel) lists them)."
            )
    return receiver
