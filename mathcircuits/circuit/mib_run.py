"""MIB's edge patching on the whole graph at once: every receiver's input rebuilt from a mask over the graph's edges.

The position-wise circuit run (:mod:`.intervene`) keeps one Python entry per (node, position) and sums each
receiver's correction sender by sender: on SmolLM2's 70,651-edge graph at 10–50 % of the edges that is ~40 s per
circuit and batch of 4 pairs. This run does what EAP-IG's ``evaluate_graph`` does, with our hooks: each sender's
change ``Δ_s = out_s − out_s^cf`` at every suffix position is stacked (``[rows, pos, sender, d_model]``: the input's
embedding, each head's ``z W_O``, each MLP's output) and each receiver reads::

    x_r = resid − Σ_s (1 − kept[s, r]) · Δ_s          (one batched matmul per layer and input kind)

then its own input map (a head's ``W_Q`` of the normed ``x_r``; a KV group's ``W_K``/``W_V``; an MLP's input norm;
the logits read ``resid_post`` minus the sum). Every receiver is rebuilt, in the circuit or not: one whose edges are
all patched reads the counterfactual's input, which is what MIB's subtraction gives the receivers that read it.
:func:`check_masked_run` compares it with the position-wise run on random circuits (the fast path proving itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.circuit.batches import CircuitBatch
from mathcircuits.circuit.chain import receiver_input
from mathcircuits.circuit.components import Receiver
from mathcircuits.circuit.edge_scores import EdgeKey
from mathcircuits.circuit.wiring import AblationValues, prefix_kv
from mathcircuits.models import HookedModel, PrefixCaches, head_out_weights, hooks, repeat_cache
from mathcircuits.models.families import UnsupportedFamilyError, block_structure

__all__: list[str] = []


def _forward_index(spec: Any, sender: Any) -> int:
    if sender.kind == "input":
        return 0
    base = 1 + sender.layer * (spec.n_heads + 1)
    return base + (sender.head if sender.kind == "head" else spec.n_heads)


def _backward_index(spec: Any, r: Receiver) -> int:
    per = spec.n_heads + 2 * spec.n_kv_heads + 1
    if r.kind == "logits":
        return spec.n_layers * per
    base = r.layer * per
    if r.kind == "q":
        return base + r.head
    if r.kind in ("k", "v"):
        return base + spec.n_heads + (0 if r.kind == "k" else spec.n_kv_heads) + r.group
    return base + per - 1


def mask_index(spec: Any, edges: Sequence[EdgeKey]) -> tuple[Tensor, Tensor]:
    """Where each edge sits in a mask: its (sender row, receiver column), as two index tensors."""
    f = torch.tensor([_forward_index(spec, s) for s, _ in edges], dtype=torch.long, device="cpu")
    b = torch.tensor([_backward_index(spec, r) for _, r in edges], dtype=torch.long, device="cpu")
    return f, b


def edge_masks(spec: Any, edges: Sequence[EdgeKey], kept: Sequence[set[int]]) -> Bool[Tensor, "circuit fwd bwd"]:
    """``[circuit, sender, receiver]`` kept-edge masks of circuits given as sets of edge indices."""
    n_f = 1 + spec.n_layers * (spec.n_heads + 1)
    n_b = spec.n_layers * (spec.n_heads + 2 * spec.n_kv_heads + 1) + 1
    f, b = mask_index(spec, edges)
    out = torch.zeros(len(kept), n_f, n_b, dtype=torch.bool, device="cpu")
    for c, k in enumerate(kept):
        idx = torch.tensor(sorted(k), dtype=torch.long, device="cpu")
        out[c, f[idx], b[idx]] = True
    return out


class _Masked:
    """Hooks of one masked run over ``circuits × batch`` rows (circuit-major)."""

    def __init__(self, model: HookedModel, values: AblationValues, masks: Tensor, B: int, S: int) -> None:
        spec = model.spec
        self.model, self.spec, self.structure = model, spec, block_structure(model)
        self.B, self.C = B, masks.shape[0]
        # 1 = patched; a float mask is a keep weight in [0, 1] (gradient mode: its gradient flows back)
        self.cut = (~masks).float() if masks.dtype == torch.bool else 1 - masks
        self.grad = self.cut.requires_grad
        self.values = values
        self.W_O = head_out_weights(model)
        n_f = masks.shape[1]
        # no_grad: one buffer written in place; gradient mode: the senders' blocks in order, never overwritten
        self.D = None if self.grad else torch.zeros(self.C * B, S, n_f, spec.d_model, device=model.device)
        self.parts: list[Tensor] = []
        self.resid: dict[str, Tensor] = {}
        self.busy = False

    def _put(self, i: int, delta: Tensor) -> None:
        """Store senders ``i, i + 1, …``'s Δ ([C·B, S, n, d])."""
        if self.D is None:
            self.parts.append(delta)
        else:
            self.D[:, :, i : i + delta.shape[2]] = delta.to(self.D.dtype)

    def _cf(self, t: Tensor, like: Tensor) -> Tensor:
        """Counterfactual values at the run's positions, repeated per circuit ([C·B, S, ...])."""
        x = t.to(like.device, like.dtype)
        x = x.expand(self.B, *x.shape[1:]) if x.shape[0] == 1 else x
        return x.repeat(self.C, *([1] * (x.dim() - 1)))

    def _fix(self, x: Tensor, bwd: Sequence[int], prev: int) -> Tensor:
        """``x`` [C·B, S, d] minus the patched senders' Δ for each receiver: [C·B, S, n_receivers, d]."""
        cut = self.cut[:, :prev, list(bwd)].to(x.device, x.dtype).transpose(1, 2)  # [C, R, prev]
        S, R = x.shape[1], len(bwd)
        if self.D is not None:
            D = self.D[:, :, :prev].to(x.dtype).reshape(self.C, self.B * S, prev, -1)  # [C, B·S, prev, d]
            corr = torch.matmul(cut[:, None], D)  # [C, B·S, R, d]: one batched matmul per circuit
        else:  # block by block, so autograd keeps each block once
            corr, lo = 0, 0
            for part in self.parts:
                n = min(part.shape[2], prev - lo)
                if n <= 0:
                    break
                P = part[:, :, :n].to(x.dtype).reshape(self.C, self.B * S, n, -1)
                corr = corr + torch.matmul(cut[:, None, :, lo : lo + n], P)
                lo += n
        return x[:, :, None] - corr.reshape(self.C * self.B, S, R, -1)

    def keep(self, act: Tensor, hook: Any, name: str) -> None:
        if self.busy:
            return
        self.resid[name] = act
        if name == hooks.resid_pre(0):
            self._put(0, (act - self._cf(self.values.embed, act))[:, :, None])

    def z(self, act: Tensor, hook: Any, layer: int) -> None:
        dz = act - self._cf(self.values.z[:, :, layer], act)
        i = 1 + layer * (self.spec.n_heads + 1)
        out = torch.einsum("rshk,hkd->rshd", dz, self.W_O[layer].to(act.device, act.dtype))
        self._put(i, out)

    def mlp_out(self, act: Tensor, hook: Any, layer: int) -> None:
        i = 1 + layer * (self.spec.n_heads + 1) + self.spec.n_heads
        self._put(i, (act - self._cf(self.values.mlp[:, :, layer], act))[:, :, None])

    def _input(self, r: Receiver, x: Tensor) -> Tensor:
        self.busy = True
        try:
            return receiver_input(self.model, self.structure, r, x)
        finally:
            self.busy = False

    def qkv(self, act: Tensor, hook: Any, layer: int, kind: str) -> Tensor:
        if self.busy:
            return act
        spec = self.spec
        n = spec.n_heads if kind == "q" else spec.n_kv_heads
        rs = [Receiver(kind, layer, head=i) if kind == "q" else Receiver(kind, layer, group=i) for i in range(n)]
        prev = 1 + layer * (spec.n_heads + 1)
        x = self._fix(self.resid[hooks.resid_pre(layer)], [_backward_index(spec, r) for r in rs], prev)
        proj = self._input(rs[0], x.reshape(-1, x.shape[-1])).reshape(*x.shape[:3], *act.shape[2:])  # [R, S, n, n, d]
        idx = torch.arange(n, device=act.device)
        return proj[:, :, idx, idx].to(act.dtype)

    def mlp_in(self, act: Tensor, hook: Any, layer: int) -> Tensor:
        if self.busy:
            return act
        spec = self.spec
        prev = 1 + layer * (spec.n_heads + 1) + (0 if self.structure.parallel else spec.n_heads)
        bwd = [_backward_index(spec, Receiver("mlp", layer))]
        x = self._fix(self.resid[hooks.sub(layer, self.structure.mlp_reads)], bwd, prev)
        return self._input(Receiver("mlp", layer), x[:, :, 0]).to(act.dtype)

    def final(self, act: Tensor, hook: Any) -> Tensor:
        n_f = self.cut.shape[1]
        return self._fix(act, [_backward_index(self.spec, Receiver("logits"))], n_f)[:, :, 0].to(act.dtype)

    def hooks(self) -> list[tuple[str, Any]]:
        fwd: list[tuple[str, Any]] = []
        for layer in range(self.spec.n_layers):
            pre, mid = hooks.resid_pre(layer), hooks.sub(layer, self.structure.mlp_reads)
            fwd.append((pre, lambda a, hook, n=pre: self.keep(a, hook, n)))
            for kind in "qkv":
                name = hooks.sub(layer, f"attn.hook_{kind}")
                fwd.append((name, lambda a, hook, l=layer, k=kind: self.qkv(a, hook, l, k)))
            fwd.append((hooks.z(layer), lambda a, hook, l=layer: self.z(a, hook, l)))
            if mid != pre:
                fwd.append((mid, lambda a, hook, n=mid: self.keep(a, hook, n)))
            fwd.append((hooks.mlp_in(layer), lambda a, hook, l=layer: self.mlp_in(a, hook, l)))
            fwd.append((hooks.mlp_out(layer), lambda a, hook, l=layer: self.mlp_out(a, hook, l)))
        fwd.append((hooks.resid_post(self.spec.n_layers - 1), self.final))
        return fwd


@torch.no_grad()
def masked_run(
    model: HookedModel,
    batch: CircuitBatch,
    values: AblationValues,
    masks: Bool[Tensor, "circuit fwd bwd"],
    readout: Any,
    chunk_rows: int = 32,
    store: PrefixCaches | None = None,
) -> Tensor:
    """Each pair's score under each circuit's kept-edge mask (:func:`edge_masks`): ``[circuit, batch]``.

    Args:
        model: the hooked model (a family whose heads write additively).
        batch: the pairs; values: their counterfactual values (:func:`~mathcircuits.circuit.intervene.resample_values`).
        masks: kept edges per circuit; readout: ``(logits at the answer positions, answers) → [rows]``.
        chunk_rows: rows (circuit × pair) per forward. store: prefix KV caches shared across calls.
    """
    if values.embed is None:
        raise FixableValueError("the masked run needs the counterfactual's embeddings. ", "use resample_values.")
    if block_structure(model).attn_out_norm is not None:
        raise UnsupportedFamilyError(
            f"{model.spec.describe()} normalises attention's output before the residual add, so one head's write is "
            "not additive and edge patching is undefined there. ",
            "score its heads and MLPs at node level instead (MIB's curves: node_scores and mib_node_scores; "
            "each sender to the logits: path_patch), or compare edge "
            "rankings on a family whose attention output enters the residual stream unnormalised (Llama, Qwen2, "
            "GPT-2).",
        )
    store = {} if store is None else store
    B, start = batch.tokens.shape[0], values.start
    S = batch.tokens.shape[1] - start
    per = max(1, chunk_rows // B)
    out = torch.empty(masks.shape[0], B, device="cpu")
    n_ans = batch.answers.shape[1]
    for lo in range(0, masks.shape[0], per):
        m = masks[lo : lo + per]
        run = _Masked(model, values, m, B, S)
        toks = batch.tokens.repeat(m.shape[0], 1)
        if start > 0:
            kv = repeat_cache(prefix_kv(model, batch.tokens, start, store), toks.shape[0])
            logits = model.bridge.run_with_hooks(toks[:, start:], fwd_hooks=run.hooks(), past_key_values=kv)
        else:
            logits = model.bridge.run_with_hooks(toks, fwd_hooks=run.hooks())
        scores = readout(logits[:, -n_ans:], batch.answers.repeat(m.shape[0], 1))
        out[lo : lo + m.shape[0]] = scores.float().cpu().reshape(m.shape[0], B)
    return out


def soft_masked_run(
    model: HookedModel,
    batch: CircuitBatch,
    values: AblationValues,
    keep: Float[Tensor, "circuit fwd bwd"],
    readout: Any,
    store: PrefixCaches | None = None,
) -> Float[Tensor, "circuit batch"]:
    """Each pair's score under each circuit's keep weights in [0, 1], differentiable in ``keep`` (on its device).

    A weight ``w`` between 0 and 1 patches ``1 − w`` of the sender's change into the receiver: the interpolation
    edge pruning trains (Bhaskar et al. 2024). Rows are circuit-major; memory grows with ``circuit × batch``.
    """
    if values.embed is None:
        raise FixableValueError("the masked run needs the counterfactual's embeddings. ", "use resample_values.")
    store = {} if store is None else store
    B, start = batch.tokens.shape[0], values.start
    S = batch.tokens.shape[1] - start
    C = keep.shape[0]
    run = _Masked(model, values, keep, B, S)
    n_ans = batch.answers.shape[1]
    toks = batch.tokens.repeat(C, 1)
    with torch.enable_grad():
        if start > 0:
            kv = repeat_cache(prefix_kv(model, batch.tokens, start, store), C * B)
            logits = model.bridge.run_with_hooks(toks[:, start:], fwd_hooks=run.hooks(), past_key_values=kv)
        else:
            logits = model.bridge.run_with_hooks(toks, fwd_hooks=run.hooks())
        return readout(logits[:, -n_ans:], batch.answers.repeat(C, 1)).reshape(C, B)


def masked_gradient(
    model: HookedModel,
    batch: CircuitBatch,
    values: AblationValues,
    keep: Float[Tensor, "fwd bwd"],
    readout: Any,
    store: PrefixCaches | None = None,
) -> tuple[Float[Tensor, " batch"], Float[Tensor, "fwd bwd"]]:
    """The pairs' scores under one circuit's keep weights and the gradient of their sum with respect to each weight.

    ``keep``: ``[sender, receiver]`` in [0, 1] (1: the edge kept), as :func:`edge_masks` lays them out. At a 0/1
    mask the gradient of an edge is the first-order change of the summed score when that edge alone is switched:
    attribution linearised at the circuit rather than at the model. Returns host tensors.
    """
    w = keep.detach().to(model.device, torch.float32)[None].requires_grad_(True)
    with torch.enable_grad():
        scores = soft_masked_run(model, batch, values, w, readout, store)[0]
        (g,) = torch.autograd.grad(scores.sum(), w)
    return scores.detach().float().cpu(), g[0].float().cpu()
