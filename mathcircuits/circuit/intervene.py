"""The circuit run: the model with everything outside a circuit ablated, at the nodes and, when asked, at the edges.

Nodes are components at positions (``L14.H2@last``, ``MLP3@op``); the token embeddings are the input
and stay clean (every circuit contains them, as in Wang et al. 2023). Only query positions are
touched (from the end of the few-shot prefix on): the prefix is identical in every prompt of a
template, so there is nothing to ablate there. At a query position ``p``:

* **node level** — a head (and, with ``mlps="ablate"``, an MLP) that is not a circuit node at ``p``
  outputs its *ablated value* (``hook_z`` / ``hook_mlp_out``); circuit nodes compute normally, at their
  own positions only (Wang et al. 2023, §4: heads are kept only where the circuit names them);
* **edge level** — additionally, each circuit node reads only the circuit nodes it has edges from
  (Hanna et al. 2024): with ``Δ_s = out_s − out_s^abl`` the change a circuit node ``s`` makes to the
  residual (``(z_s − z_s^abl) W_O`` for a head, ``mlp_s − mlp_s^abl`` for an MLP), a receiver ``r`` of
  the circuit reads::

      input_r[p] = f_r( resid[p] − Σ_{s ∈ C at p, s upstream of r, (s → r) ∉ E} Δ_s )

  where ``f_r`` is the receiver's own input map (``W_Q`` of one head at its position, ``W_K``/``W_V`` of a
  KV group at every position, the MLP's input norm, or the final norm and unembedding at the readout
  positions). Under GQA a key/value is a KV group's: it reads the union of the edges into its heads.

The ablated value is the paired counterfactual's (``resample``: the counterfactual run, the same
intervention discovery used) or a position-aligned mean over a pool of counterfactual prompts of the
same template, prompt length and answer length (``position_mean``; Wang et al. 2023's mean over the ABC
distribution). With ``mlps="keep"`` the MLPs always compute (Wang et al.'s IOI circuit); with
``"ablate"`` they are nodes like the heads (Hanna et al. 2024).

The score is the whole answer's log-probability (teacher-forced). An empty circuit under ``resample``
is the counterfactual run at the readout positions exactly.

The run executes only the query suffix on the prefix's KV cache (the prefix is clean in every row);
:func:`check_circuit_run` compares it with the plain full forward on probe pairs before first use.
Edge level needs each head's write to be additive (``z W_O``), so families with a norm after attention
(Gemma 2/3, OLMo 2) are refused there; node level works on every family.

Usage::

    values = resample_values(model, batch)
    logp = circuit_logprob(model, batch, values, [wiring_of(circuit)])     # [1, batch]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits.circuit.batches import CircuitBatch
from mathcircuits.circuit.chain import receiver_input
from mathcircuits.circuit.components import Receiver
from mathcircuits.circuit.pair_cache import position_scores
from mathcircuits.circuit.wiring import (
    ABLATION_KINDS,
    LOGITS,
    MLP_MODES,
    AblationKind,
    AblationValues,
    MLPMode,
    NodeKey,
    Wiring,
    input_node,
    prefix_kv,
    record_values,
    resample_values,
    upstream,
    without_mlps,
)
from mathcircuits.models import HookedModel, fast_paths_enabled, hooks
from mathcircuits.models.families import UnsupportedFamilyError, block_structure
from mathcircuits.models.integrity import compare, model_depth, model_dtype, probe_pairs, verify_once
from mathcircuits.models.placement import head_out_weights
from mathcircuits.models.prefix import repeat_cache

#: A circuit run's score of each row from the logits at the answer's readout positions and the answer's tokens.
RunScore: TypeAlias = Callable[[Tensor, Tensor], Tensor]

__all__ = [
    "ABLATION_KINDS",
    "MLP_MODES",
    "AblationKind",
    "AblationValues",
    "MLPMode",
    "NodeKey",
    "RunScore",
    "Wiring",
    "answer_logprob",
    "check_circuit_run",
    "circuit_logprob",
    "resample_values",
]


class _Run:
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


def _check_edges_supported(model: HookedModel) -> None:
    structure = block_structure(model)
    if structure.attn_out_norm is not None:
        raise UnsupportedFamilyError(
            f"{model.spec.describe()} normalises attention's output before the residual add, so one head's write is "
            "not additive and an edge-level run is undefined. Fix: evaluate at node level (granularity='nodes')."
        )


def answer_logprob(logits: Tensor, answers: Tensor) -> Tensor:
    """The whole answer's log-probability per row, from the logits at the answer's readout positions."""
    return position_scores(logits, answers)[1].sum(-1)


@torch.no_grad()
def circuit_logprob(
    model: HookedModel,
    batch: CircuitBatch,
    values: AblationValues,
    wirings: Sequence[Wiring],
    mlps: str = "ablate",
    chunk_rows: int = 512,
    fast: bool = True,
    store: dict[tuple[int, ...], Any] | None = None,
    readout: RunScore = answer_logprob,
) -> Float[Tensor, "wiring batch"]:
    """The whole answer's log-probability of each pair under each wiring (see the module docstring).

    Args:
        model: the hooked model.
        batch: the pairs (:func:`~mathcircuits.circuit.batches.circuit_batches`).
        values: the ablated values at the batch's query positions (:func:`resample_values`, or a pool mean).
        wirings: the circuits, node or edge level.
        mlps: ``"ablate"`` (MLPs outside the circuit take their ablated value) or ``"keep"`` (MLPs always compute).
        chunk_rows: rows (wiring × pair) per forward.
        fast: run only the query suffix on the prefix's KV cache (exact; False: the plain full forward).
        store: a dict of prefix KV caches shared across calls.
        readout: another score than the answer's log-probability: ``(logits [rows, n_answer, vocab], answers
            [rows, n_answer]) → [rows]``, rows wiring-major (``len(chunk) × batch``).

    Returns:
        ``[wiring, batch]`` log-probabilities (nats), or the readout's scores.
    """
    if mlps not in MLP_MODES:
        raise ValueError(f"mlps {mlps!r} is unknown. Fix: use one of {list(MLP_MODES)}.")
    if any(w.edges is not None for w in wirings):
        _check_edges_supported(model)
    if any(w.input for w in wirings) and values.embed is None:
        raise ValueError(
            "a wiring with the input as a sender needs the counterfactual's embeddings. Fix: ablation values from "
            "resample_values (a pool mean has none)."
        )
    fast = fast and fast_paths_enabled()
    if fast:
        verify_once(model.bridge, "circuit run", lambda: check_circuit_run(model))
    store = {} if store is None else store
    start = values.start if fast else 0
    B = batch.tokens.shape[0]
    per = max(1, chunk_rows // B)
    out = torch.empty(len(wirings), B, device="cpu")
    n_ans = batch.answers.shape[1]
    for lo in range(0, len(wirings), per):
        chunk = [(w if mlps == "ablate" else without_mlps(w)) for w in wirings[lo : lo + per]]
        run = _Run(model, batch, values, chunk, start)
        run.ablate_mlps = [mlps == "ablate"] * len(chunk)
        run.set_mlp_mode(mlps)
        toks = batch.tokens.repeat(len(chunk), 1)
        if start > 0:
            kv = repeat_cache(prefix_kv(model, batch.tokens, start, store), toks.shape[0])
            logits = model.bridge.run_with_hooks(toks[:, start:], fwd_hooks=run.hooks(), past_key_values=kv)
        else:
            logits = model.bridge.run_with_hooks(toks, fwd_hooks=run.hooks())
        scores = readout(logits[:, -n_ans:], batch.answers.repeat(len(chunk), 1))
        out[lo : lo + len(chunk)] = scores.float().cpu().reshape(len(chunk), B)
    return out


def check_circuit_run(model: HookedModel) -> tuple[float, float]:
    """The prefix-cached circuit run against the plain full forward, on probe pairs (its run-time check).

    One edge-level wiring (a last-layer head reading a first-layer head through its value, the first MLP
    without edges) and one node-level wiring, both ablation values resampled from the probe counterfactuals.

    Returns:
        ``(largest difference, tolerance)`` of the answers' log-probabilities.
    """
    spec = model.spec
    probe = probe_pairs(spec.vocab_size)
    dev = model.device
    answers = torch.tensor(probe["answer_tokens"], device=dev)
    toks = torch.cat([torch.tensor(probe["tokens"], device=dev), answers[:, :-1]], 1)
    cf = torch.cat([torch.tensor(probe["cf_tokens"], device=dev), answers[:, :-1]], 1)
    n = len(probe["tokens"][0])
    where = {"d": n - 3, "last": n - 1, "ans1": n}
    roles = {"A": n - 3, "B": n - 2, "op": n - 3, "last": n - 1}
    batch = CircuitBatch(list(range(len(probe))), toks, cf, answers, n, 8, n - 3, where, roles, ["probe"] * 4, [""] * 4)
    last = spec.n_layers - 1
    a, b = ("head", 0, 0, "d"), ("head", last, spec.n_heads - 1, "last")
    m = ("mlp", 0, -1, "d")
    wirings = [Wiring(frozenset({a, b, m}), None)]
    if block_structure(model).attn_out_norm is None and spec.n_layers > 1:
        wirings.append(Wiring(frozenset({a, b, m}), frozenset({(a, b, "v"), (b, LOGITS, "logits")})))
    recorded = record_values(model, cf, 0, {})
    values = AblationValues(recorded.z[:, 8:], recorded.mlp[:, 8:], 8)
    fast = circuit_logprob(model, batch, values, wirings, fast=True)
    plain = circuit_logprob(model, batch, values, wirings, fast=False)
    return compare(fast, plain, model_dtype(model), model_depth(model))
