"""What each circuit node does, read from where its head attends and where its edges go.

A head node at position ``t`` is labelled by the token role that receives most of its
attention from ``t`` (mean over pairs): the operands ``A``/``B`` → *operand mover*, the
operator → *operator reader*, the few-shot prefix → *few-shot reader*, the other tokens of
the query → *local*. A head with an edge to the logits is also an *answer writer*. An MLP
node is named by its position (e.g. *MLP at op*). The label carries the attention share.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from mathcircuits.circuit.discover import ROLES, scan_positions
from mathcircuits.circuit.result import Circuit
from mathcircuits.data.batching import iter_batches
from mathcircuits.data.pairs import PairSet
from mathcircuits.models import HookedModel, hooks
from mathcircuits.models.capture import capture

__all__ = ["label_roles"]

_NAMES = {"operands": "operand mover", "op": "operator reader", "prefix": "few-shot reader", "local": "local"}


@torch.no_grad()
def label_roles(model: HookedModel, dataset: PairSet, circuit: Circuit, batch_size: int = 16) -> Circuit:
    """The circuit with each node's ``role`` filled in.

    Args:
        model: the hooked model the circuit was found on.
        dataset: pairs with token-role columns (the circuit's data).
        circuit: a :class:`Circuit` found with ``positions="roles"`` or ``"suffix"``.
        batch_size: prompts per forward.

    Returns:
        A copy of the circuit with roles.
    """
    circuit.check_model(model)
    positions = circuit.settings.positions
    layers = sorted({n.layer for n in circuit.nodes if n.kind == "head"})
    heads = [n for n in circuit.nodes if n.kind == "head"]
    sums = {n.name: torch.zeros(4) for n in heads}  # operands, op, prefix, local
    cols = {c: dataset[c] for c in ("tokens", "prefix_len")}
    for col in ROLES.values():
        cols[col] = [p[-1] if isinstance(p, (list, tuple)) else p for p in dataset[col]]
    for _, b in iter_batches(cols, batch_size, model.device):
        seq = b["tokens"].shape[1]
        _, pats = capture(model.bridge, b["tokens"], [hooks.pattern(layer) for layer in layers], position=None)
        where = scan_positions(b, positions, seq)
        roles = scan_positions(b, "roles", seq)
        prefix = int(b["prefix_len"].min())
        for n in heads:
            att = pats[hooks.pattern(n.layer)][:, n.head, where[n.position]].float()  # [B, key]
            operands = att[:, roles["A"]] + att[:, roles["B"]]
            op = att[:, roles["op"]]
            pre = att[:, :prefix].sum(-1)
            sums[n.name] += torch.stack([operands, op, pre, 1 - operands - op - pre]).sum(1).cpu()
    writers = {e.sender for e in circuit.edges if e.receiver == "logits"}
    new = []
    for n in circuit.nodes:
        if n.kind == "head":
            share = sums[n.name] / len(dataset)
            k = int(share.argmax())
            label = f"{list(_NAMES.values())[k]} ({float(share[k]):.2f})"
            role = ("answer writer, " if n.name in writers else "") + label
        elif n.kind == "mlp":
            role = f"MLP at {n.position}"
        else:
            role = "output"
        new.append(replace(n, role=role))
    return replace(circuit, nodes=tuple(new))
