"""Sender → receiver path patching by its definition: two full hooked forwards per sender (slow, plainly correct).

For a sender ``s`` patched at positions ``P`` and a receiver ``r``: run the reference prompt
with every head frozen at its reference ``hook_z`` except ``s`` (counterfactual at ``P``), record
the receiver's input; then run the reference prompt with only that input replaced and read the
answer at the last position. :func:`mathcircuits.circuit.exact_edges` must agree with it; the
run-time check compares them on the user's model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from mathcircuits.circuit.components import Receiver, Sender, check_positions
from mathcircuits.circuit.pair_cache import EdgeBatch, PairCache, check_request, put_receiver, receiver_slice
from mathcircuits.models import HookedModel, hooks
from mathcircuits.models.readout import Readout
from mathcircuits.patching import Metric

__all__ = ["reference_edges"]


@torch.no_grad()
def reference_edges(
    model: HookedModel,
    cache: PairCache,
    receiver: Receiver,
    senders: Sequence[Sender],
    positions: Sequence[int],
    metric: Metric,
) -> EdgeBatch:
    """Sender → receiver effects by the definition: two full hooked forwards per sender.

    Args:
        model: the hooked model.
        cache: the batch and its cached runs (:func:`pair_cache`).
        receiver: a q/k/v/mlp :class:`Receiver`.
        senders: heads and MLPs upstream of the receiver.
        positions: where each sender is patched (all of them at once).
        metric: the effect measure at the last position.

    Returns:
        :class:`EdgeBatch` of per-pair effects, one column per sender.
    """
    receiver = check_request(model, receiver, senders, cache.structure)
    bridge, L = model.bridge, model.spec.n_layers
    tokens, ref, cf = cache.tokens, cache.ref, cache.cf
    seq = tokens.shape[1]
    pos = check_positions(positions, seq, "sender")
    rpos = receiver.positions(seq)
    z_names = [hooks.z(layer) for layer in range(L)]
    m_names = [hooks.mlp_out(layer) for layer in range(L)]
    out = torch.empty(tokens.shape[0], len(senders))
    for j, s in enumerate(senders):
        record: dict[str, Tensor] = {}

        def freeze(act: Tensor, hook: Any, layer: int = 0, s: Sender = s) -> Tensor:
            new = ref[z_names[layer]].clone()
            if s.kind == "head" and s.layer == layer:
                new[:, pos, s.head] = cf[z_names[layer]][:, pos, s.head]
            return new

        def patch_mlp(act: Tensor, hook: Any, s: Sender = s) -> Tensor:
            new = act.clone()
            new[:, pos] = cf[m_names[s.layer]][:, pos]
            return new

        def keep(act: Tensor, hook: Any, record: dict[str, Tensor] = record) -> None:
            record["r"] = act.detach().clone()

        fwd = [(z_names[layer], lambda a, hook, layer=layer: freeze(a, hook, layer)) for layer in range(L)]
        if s.kind == "mlp":
            fwd.append((m_names[s.layer], patch_mlp))
        bridge.run_with_hooks(tokens, fwd_hooks=fwd + [(receiver.hook(), keep)])
        value = receiver_slice(receiver, record["r"])[:, rpos]

        def replace(act: Tensor, hook: Any, value: Tensor = value) -> Tensor:
            return put_receiver(receiver, act, value, rpos)

        logits = bridge.run_with_hooks(tokens, fwd_hooks=[(receiver.hook(), replace)])[:, -1]
        out[:, j] = metric(Readout.from_logits(logits, cache.answer, metric.needs_probs), cache.clean).float().cpu()
    return EdgeBatch(effects=out, clean_logit=cache.clean.logit)
