"""Sender → receiver path patching by the definition (:mod:`mathcircuits.circuit.edges`): two full forwards per sender.

The plain reference :func:`mathcircuits.circuit.exact_edges` is checked against. A logits receiver reads
the frozen run's own answer readout.

Usage::

    cache = pair_cache(model, tokens, cf_tokens, answers[:, 0], answers=answers)
    batch = reference_edges(model, cache, Receiver("q", 20, 8), senders, [seq - 1], METRICS["answer_logprob"])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from mathcircuits.circuit.components import Receiver, Sender, check_positions
from mathcircuits.circuit.pair_cache import EdgeBatch, PairCache, check_request, put_receiver, receiver_slice
from mathcircuits.models import HookedModel, hooks
from mathcircuits.patching.metrics import Metric, answer_readout

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
    """Sender → receiver effects by the definition: two full hooked forwards per sender (one for the logits).

    Every sender is patched at all ``positions`` at once.
    """
    receiver = check_request(model, receiver, senders, cache.structure)
    bridge, L = model.bridge, model.spec.n_layers
    tokens, ref, cf = cache.tokens, cache.ref, cache.cf
    answers = cache.all_answers
    seq, n_ans = tokens.shape[1], answers.shape[1]
    pos = check_positions(positions, seq, "sender")
    z_names = [hooks.z(layer) for layer in range(L)]
    m_names = [hooks.mlp_out(layer) for layer in range(L)]
    out = torch.empty(tokens.shape[0], len(senders), device="cpu")
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
        if receiver.kind == "logits":  # the frozen run's own answer readout
            logits = bridge.run_with_hooks(tokens, fwd_hooks=fwd)[:, -n_ans:]
        else:
            bridge.run_with_hooks(tokens, fwd_hooks=fwd + [(receiver.hook(), keep)])
            rpos = receiver.positions(seq)
            value = receiver_slice(receiver, record["r"])[:, rpos]

            def replace(act: Tensor, hook: Any, value: Tensor = value, rpos: list[int] = rpos) -> Tensor:
                return put_receiver(receiver, act, value, rpos)

            logits = bridge.run_with_hooks(tokens, fwd_hooks=[(receiver.hook(), replace)])[:, -n_ans:]
        out[:, j] = metric(answer_readout(logits, answers, metric), cache.clean).float().cpu()
    return EdgeBatch(effects=out, clean_logit=cache.clean.logit)
