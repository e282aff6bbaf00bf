"""What each circuit node does, read from where its head attends and where its edges go.

A head node at position ``t`` is labelled by the token role that receives most of its
attention from ``t`` (mean over pairs): the operands ``A``/``B`` → *operand mover*, the
operator → *operator reader*, the few-shot prefix → *few-shot reader*, the other tokens of
the query → *local*, the teacher-forced answer's own tokens → *answer reader*. A head with an
edge to the logits is also an *answer writer*. An MLP node is named by its position (e.g.
*MLP at op*). The label carries the attention share (mean over the pairs whose batches have
the node's position).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from mathcircuits.circuit.batches import circuit_batches
from mathcircuits.circuit.result import Circuit
from mathcircuits.data.pairset import PairSet
from mathcircuits.models import HookedModel, capture, hooks

__all__ = ["label_roles"]

_NAMES = ("operand mover", "operator reader", "few-shot reader", "local", "answer reader")


@torch.no_grad()
def label_roles(model: HookedModel, pairs: PairSet, circuit: Circuit, batch_size: int = 16) -> Circuit:
    """The circuit with each node's ``role`` filled in (``circuit.settings["positions"]`` names the labelling)."""
    pairs.require_model(model, "label_roles")
    circuit.check_model(model)
    positions = circuit.settings.positions
    layers = sorted({n.layer for n in circuit.nodes if n.kind == "head"})
    heads = [n for n in circuit.nodes if n.kind == "head"]
    sums = {n.name: torch.zeros(len(_NAMES), device="cpu") for n in heads}
    counts = {n.name: 0 for n in heads}
    for b in circuit_batches(model, pairs, positions, batch_size):
        _, pats = capture(model.bridge, b.tokens, [hooks.pattern(layer) for layer in layers], position=None)
        at, a = b.where, b.roles
        for n in heads:
            if n.position not in at:
                continue
            att = pats[hooks.pattern(n.layer)][:, n.head, at[n.position]].float()  # [B, key]
            operands = att[:, a["A"]] + att[:, a["B"]]
            op = att[:, a["op"]]
            pre = att[:, : b.prefix_len].sum(-1)
            answer = att[:, b.n_prompt :].sum(-1)
            rest = 1 - operands - op - pre - answer
            sums[n.name] += torch.stack([operands, op, pre, rest, answer]).sum(1).cpu()
            counts[n.name] += len(b.idx)
    writers = {e.sender for e in circuit.edges if e.receiver == "logits"}
    new = []
    for n in circuit.nodes:
        if n.kind == "head":
            share = sums[n.name] / max(1, counts[n.name])
            k = int(share.argmax())
            label = f"{_NAMES[k]} ({float(share[k]):.2f})"
            role = ("answer writer, " if n.name in writers else "") + label
        elif n.kind == "mlp":
            role = ("answer writer, " if n.name in writers else "") + f"MLP at {n.position}"
        else:
            role = "output"
        new.append(replace(n, role=role))
    return replace(circuit, nodes=tuple(new))
