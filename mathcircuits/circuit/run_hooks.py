"""The hooks of one circuit run: :class:`CircuitRun` over ``wirings × batch`` rows (see :mod:`.intervene`).

Node level masks each head's ``hook_z`` and each MLP's output to its ablated value outside the circuit; edge level
also records each circuit node's change ``Δ_s`` (the input's, clean minus counterfactual embedding, when the input
is a sender) and rebuilds each circuit receiver's input from its layer's residual minus the ``Δ`` of the circuit
nodes without an edge to it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from mathcircuits.circuit.batches import CircuitBatch
from mathcircuits.circuit.chain import receiver_input
from mathcircuits.circuit.components import Receiver
from mathcircuits.circuit.wiring import LOGITS, AblationValues, NodeKey, Wiring, input_node, upstream
from mathcircuits.models import HookedModel, head_out_weights, hooks
from mathcircuits.models.families import block_structure

__all__: list[str] = []


class CircuitRun:
    """The hooks of one circuit run over ``len(wirings) × batch`` rows (wiring-major)."""

    def __init__(
        self, model: HookedModel, batch: CircuitBatch, values: AblationValues, wirings: Sequence[Wiring], start: int
    ) -> None:
        spec = model.spec
        self.model, self.spec, self.start = model, spec, start
        self.structure = block_structure(model)
        self.B, self.W = batch.tokens.shape[0], len(wirings)
        self.S = batch.tokens.shape[1] - start
        self.values = values
        self.where = batch.where
        self.readout = batch.readout
        # node masks over the query positions, per row: True = computes, False = ablated
        self.head_keep = torch.ones(
            self.W * self.B, self.S, spec.n_layers, spec.n_heads, dtype=torch.bool, device="cpu"
        )
        self.mlp_keep = torch.ones(self.W * self.B, self.S, spec.n_layers, dtype=torch.bool, device="cpu")
        q0 = values.start - start  # the first ablated position, in run coordinates
        self.nodes: list[list[tuple[NodeKey, int]]] = []  # per wiring: (node, position) present in this batch
        self.ablate_mlps: list[bool] = []
        self.complement = [w.complement for w in wirings]
        self.present = [[(n, batch.where[n[3]]) for n in w.nodes if n[3] in batch.where and n[0] != "input"]
            for w in wirings]  # fmt: skip
        for w, wiring in enumerate(wirings):
            rows = slice(w * self.B, (w + 1) * self.B)
            present = self.present[w]
            inputs = [(input_node(lab), p) for lab, p in batch.where.items() if p >= values.start and wiring.input]
            self.nodes.append([] if wiring.complement else present + inputs)
            self.head_keep[rows, q0:] = wiring.complement
            for (kind, layer, head, _), p in present:
                if kind == "head":
                    self.head_keep[rows, p - start, layer, head] = not wiring.complement
                else:
                    self.mlp_keep[rows, p - start, layer] = not wiring.complement
        self.wirings = list(wirings)
        self.into = [self._edges_into(w) for w in range(self.W)]
        self.at: list[dict[int, list[NodeKey]]] = []  # per wiring: position → its nodes (the corrections' loop)
        for present in self.nodes:
            at: dict[int, list[NodeKey]] = defaultdict(list)
            for n, p in present:
                at[p].append(n)
            self.at.append(at)
        self.delta: dict[tuple[int, NodeKey], Tensor] = {}  # (wiring, node) → Δ at its position [B, d_model]
        self.resid: dict[str, Tensor] = {}
        self.W_O = head_out_weights(model) if any(w.edges is not None for w in wirings) else None
        self.busy = False  # inside our own call of a receiver's input map, whose hooks must pass through

    def set_mlp_mode(self, mlps: str) -> None:
        """MLPs: ablated outside the circuit (``"ablate"``) or always computing (``"keep"``, the default mask)."""
        if mlps != "ablate":
            return
        q0 = self.values.start - self.start
        for w, present in enumerate(self.present):
            rows = slice(w * self.B, (w + 1) * self.B)
            self.mlp_keep[rows, q0:] = self.complement[w]
            for (kind, layer, _, _), p in present:
                if kind == "mlp":
                    self.mlp_keep[rows, p - self.start, layer] = not self.complement[w]

    # --- the ablated values at the run's positions -------------------------------------------------------
    def _abl(self, which: str, layer: int, act: Tensor) -> Tensor:
        v = self.values.z if which == "z" else self.values.mlp
        off = self.values.start - self.start  # values start at the first query position
        out = act.clone()
        val = v[:, :, layer].to(act.device, act.dtype)  # [rows|1, S_q, ...]
        reps = self.W if val.shape[0] > 1 else 1
        full = val.repeat(reps, *([1] * (val.dim() - 1))) if reps > 1 else val
        out[:, off:] = full.expand(act.shape[0], *full.shape[1:])
        return out

    # --- hooks -----------------------------------------------------------------------------------------------
    def z(self, act: Tensor, hook: Any, layer: int) -> Tensor:
        keep = self.head_keep[:, :, layer].to(act.device)[..., None]
        abl = self._abl("z", layer, act)
        new = torch.where(keep, act, abl)
        if self.W_O is not None:
            for w, present in enumerate(self.nodes):
                rows = slice(w * self.B, (w + 1) * self.B)
                for n, p in present:
                    if n[0] == "head" and n[1] == layer:
                        dz = new[rows, p - self.start, n[2]] - abl[rows, p - self.start, n[2]]
                        self.delta[(w, n)] = dz @ self.W_O[layer, n[2]]
        return new

    def mlp_out(self, act: Tensor, hook: Any, layer: int) -> Tensor:
        keep = self.mlp_keep[:, :, layer].to(act.device)[..., None]
        abl = self._abl("mlp", layer, act)
        new = torch.where(keep, act, abl)
        if self.W_O is not None:
            for w, present in enumerate(self.nodes):
                rows = slice(w * self.B, (w + 1) * self.B)
                for n, p in present:
                    if n[0] == "mlp" and n[1] == layer and self.ablate_mlps[w]:
                        self.delta[(w, n)] = new[rows, p - self.start] - abl[rows, p - self.start]
        return new

    def keep_resid(self, act: Tensor, hook: Any, name: str) -> None:
        if self.busy:  # the norms we call ourselves fire their (aliased) input hooks too
            return
        self.resid[name] = act
        if name != hooks.resid_pre(0) or self.values.embed is None:
            return
        for w, present in enumerate(self.nodes):  # the input's Δ: clean minus counterfactual embedding
            rows = slice(w * self.B, (w + 1) * self.B)
            for n, p in present:
                if n[0] == "input":
                    cf = self.values.embed[:, p - self.values.start].to(act.device, act.dtype)
                    self.delta[(w, n)] = act[rows, p - self.start] - cf

    def _correction(self, w: int, receiver: NodeKey, senders_ok: set[NodeKey], p: int) -> Tensor | None:
        """Σ Δ_s of circuit nodes at ``p`` upstream of ``receiver`` without an edge to it (None: nothing)."""
        total = None
        for n in self.at[w].get(p, ()):
            if n in senders_ok or (w, n) not in self.delta:
                continue
            if not upstream(n, receiver, self.structure.parallel):
                continue
            total = self.delta[(w, n)] if total is None else total + self.delta[(w, n)]
        return total

    def _edges_into(self, w: int) -> dict[tuple[NodeKey, str], set[NodeKey]]:
        into: dict[tuple[NodeKey, str], set[NodeKey]] = defaultdict(set)
        for s, r, via in self.wirings[w].edges or ():
            into[(r, via)].add(s)
        return into

    def _input(self, receiver: Receiver, x: Tensor) -> Tensor:
        self.busy = True
        try:
            return receiver_input(self.model, self.structure, receiver, x)
        finally:
            self.busy = False

    def qkv(self, act: Tensor, hook: Any, layer: int, kind: str) -> Tensor:
        if self.busy:
            return act
        jobs: list[tuple[slice, int, int, Tensor]] = []  # (rows, position, head or group, corrected residual)
        base = None
        for w, wiring in enumerate(self.wirings):
            if wiring.edges is None:
                continue
            rows = slice(w * self.B, (w + 1) * self.B)
            into = self.into[w]
            heads = [(n, p) for n, p in self.nodes[w] if n[0] == "head" and n[1] == layer]
            found: list[tuple[int, int, Tensor]] = []
            if kind == "q":
                for n, p in heads:
                    corr = self._correction(w, n, into[(n, "q")], p)
                    if corr is not None:
                        found.append((p, n[2], corr))
            else:
                g = self.spec.group_size
                for group in sorted({n[2] // g for n, _ in heads}):
                    members = [n for n, _ in heads if n[2] // g == group]
                    ok = set().union(*(into[(n, kind)] for n in members))
                    for p in sorted({q for _, q in self.nodes[w]}):
                        corr = self._correction(w, members[0], ok, p)
                        if corr is not None:
                            found.append((p, group, corr))
            base = self.resid[hooks.resid_pre(layer)] if base is None else base
            jobs += [(rows, p, index, base[rows, p - self.start] - corr.to(base.dtype)) for p, index, corr in found]
        if not jobs:
            return act
        r = Receiver(kind, layer, head=0) if kind == "q" else Receiver(kind, layer, group=0)
        proj = self._input(r, torch.cat([x for *_, x in jobs]))  # one call for every job: [rows, heads|groups, d]
        out, at = act.clone(), 0
        for rows, p, index, x in jobs:
            out[rows, p - self.start, index] = proj[at : at + x.shape[0], index].to(act.dtype)
            at += x.shape[0]
        return out

    def mlp_in(self, act: Tensor, hook: Any, layer: int) -> Tensor:
        if self.busy:
            return act
        out = act
        for w, wiring in enumerate(self.wirings):
            if wiring.edges is None or not self.ablate_mlps[w]:
                continue
            rows = slice(w * self.B, (w + 1) * self.B)
            into = self.into[w]
            for n, p in self.nodes[w]:
                if n[0] != "mlp" or n[1] != layer:
                    continue
                corr = self._correction(w, n, into[(n, "mlp")], p)
                if corr is None:
                    continue
                if out is act:
                    out = act.clone()
                base = self.resid[hooks.sub(layer, self.structure.mlp_reads)]
                x = base[rows, p - self.start] - corr.to(base.dtype)
                out[rows, p - self.start] = self._input(Receiver("mlp", layer), x)
        return out

    def final(self, act: Tensor, hook: Any) -> Tensor:
        out = act
        for w, wiring in enumerate(self.wirings):
            if wiring.edges is None:
                continue
            rows = slice(w * self.B, (w + 1) * self.B)
            ok = self.into[w][(LOGITS, "logits")]
            for p in self.readout:
                corr = self._correction(w, LOGITS, ok, p)
                if corr is None:
                    continue
                if out is act:
                    out = act.clone()
                out[rows, p - self.start] = act[rows, p - self.start] - corr.to(act.dtype)
        return out

    def hooks(self) -> list[tuple[str, Any]]:
        L = self.spec.n_layers
        fwd: list[tuple[str, Any]] = []
        edges = self.W_O is not None
        for layer in range(L):
            if edges:
                pre = hooks.resid_pre(layer)
                fwd.append((pre, lambda a, hook, n=pre: self.keep_resid(a, hook, n)))
                for kind in "qkv":
                    fwd.append(
                        (
                            hooks.sub(layer, f"attn.hook_{kind}"),
                            lambda a, hook, l=layer, k=kind: self.qkv(a, hook, l, k),
                        )
                    )
            fwd.append((hooks.z(layer), lambda a, hook, l=layer: self.z(a, hook, l)))
            if edges:
                mid = hooks.sub(layer, self.structure.mlp_reads)
                fwd.append((mid, lambda a, hook, n=mid: self.keep_resid(a, hook, n)))
                fwd.append((hooks.mlp_in(layer), lambda a, hook, l=layer: self.mlp_in(a, hook, l)))
            fwd.append((hooks.mlp_out(layer), lambda a, hook, l=layer: self.mlp_out(a, hook, l)))
        if edges:
            fwd.append((hooks.resid_post(L - 1), self.final))
        return fwd  # fmt: skip
