"""Step 1 of sender → receiver path patching without a forward: the sender's change through the MLP chain.

With every head frozen, a sender's patch at positions ``P`` changes the residual only at ``P`` and only
through the position-wise MLPs (and norms) between sender and receiver (``δ``, see :mod:`.edges`). ``δ``
is computed for many senders at once (one MLP call per layer), giving the receiver's new input
(:func:`patched_inputs`) or, for the logits, the whole effect without any forward (:func:`logits_effects`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from mathcircuits.circuit.components import Receiver, Sender, check_positions
from mathcircuits.circuit.pair_cache import PairCache, position_scores, readout_of, receiver_slice, unembed
from mathcircuits.models import (
    HeadOutWeights,
    HookedModel,
    attn_change,
    attn_pre_norm_name,
    head_out_weights,
    hooks,
    mlp_change,
)
from mathcircuits.models.families import BlockStructure, UnsupportedFamilyError
from mathcircuits.patching.metrics import Metric

__all__: list[str] = []


def receiver_input(model: HookedModel, structure: BlockStructure, receiver: Receiver, resid: Tensor) -> Tensor:
    """The receiver's hook value from the residual it reads (``resid_pre`` for q/k/v, the MLP's input residual)."""
    block = model.bridge.blocks[receiver.layer]
    if receiver.kind == "mlp":
        return getattr(block, structure.mlp_in_norm)(resid) if structure.mlp_in_norm else resid
    ln1 = getattr(block, "ln1", None)
    x = ln1(resid) if ln1 is not None else resid
    proj = getattr(block.attn, receiver.kind)(x)
    d_head = model.spec.d_head
    # [..., heads·d_head] → [..., heads, d_head]; the test is on the rank, not the width, because with a single
    # key/value head (multi-query attention, e.g. Gemma 3 270M) the K/V width *is* d_head
    return proj.reshape(*proj.shape[:-1], -1, d_head) if proj.dim() == resid.dim() else proj


def _deltas(
    model: HookedModel,
    cache: PairCache,
    senders: Sequence[Sender],
    P: Tensor,
    until: int,
    W_O: Tensor | HeadOutWeights,
    snapshots: dict[int, Tensor] | None = None,
) -> Tensor:
    """The residual change at positions ``P`` that each sender causes before layer ``until``: [sender, B, |P|, d].

    ``W_O``: ``[layer, head, d_head, d_model]``. With ``snapshots`` (a dict), the change as a receiver at each
    layer ``m ≤ until`` sees it is stored there too (zeros for senders not upstream).
    """
    structure, ref, cf = cache.structure, cache.ref, cache.cf
    B, n_p = cache.tokens.shape[0], len(P)

    def at(name: str, store: dict[str, Tensor]) -> Tensor:
        x = store[name][:, P]
        return x.reshape(-1, *x.shape[2:])  # rows = (pair, position): the MLP chain is position-wise

    def entry(s: Sender) -> int:  # the first MLP the sender's change passes
        if s.kind == "head":
            return s.layer + 1 if structure.parallel else s.layer  # parallel: the head's own MLP does not read it
        return s.layer + 1

    def start(idx: list[int], layer: int) -> Tensor:
        heads = [j for j in idx if senders[j].kind == "head"]
        out = torch.empty(len(idx), B * n_p, W_O.shape[-1], dtype=W_O.dtype, device=model.layer_device(layer))
        if heads:
            hs = torch.tensor([senders[j].head for j in heads], device="cpu")
            dz = (at(hooks.z(layer), cf) - at(hooks.z(layer), ref))[:, hs].transpose(0, 1)  # [h, R, d_head]
            change = torch.einsum("hrd,hdm->hrm", dz, W_O[layer, hs])
            pre_name = attn_pre_norm_name(structure, layer)
            pre = None if pre_name is None else at(pre_name, ref).repeat(len(heads), 1)
            flat = attn_change(model, structure, layer, pre, change.reshape(-1, change.shape[-1]))
            out[[idx.index(j) for j in heads]] = flat.reshape(len(heads), -1, flat.shape[-1]).to(out.dtype)
        for k, j in enumerate(idx):
            if senders[j].kind == "mlp":
                out[k] = at(hooks.mlp_out(layer), cf) - at(hooks.mlp_out(layer), ref)
        return out

    by_layer: dict[int, list[int]] = {}
    for j, s in enumerate(senders):
        by_layer.setdefault(s.layer, []).append(j)
    # the rows live on the device of the block they pass (a model split by accelerate moves them along), the
    # cached activations on the device of the layer that made them; the result where the last block ran
    last = model.layer_device(min(until, model.spec.n_layers - 1))
    result = torch.empty(len(senders), B * n_p, W_O.shape[-1], dtype=W_O.dtype, device=last)
    live: list[int] = []
    delta = torch.empty(0, B * n_p, W_O.shape[-1], dtype=W_O.dtype, device=model.layer_device(0))
    for m in range(until + 1):
        delta = delta.to(model.layer_device(min(m, model.spec.n_layers - 1)))
        for layer, idx in sorted(by_layer.items()):
            new = [j for j in idx if entry(senders[j]) == m or (m == until and entry(senders[j]) >= until)]
            new = [j for j in new if j not in live]
            if new:
                live += new
                delta = torch.cat([delta, start(new, layer).to(delta.device, delta.dtype)])
        if snapshots is not None:
            snap = torch.zeros(len(senders), B * n_p, W_O.shape[-1], dtype=torch.bfloat16, device="cpu")
            snap[live] = delta.to("cpu", snap.dtype)
            snapshots[m] = snap.reshape(len(senders), B, n_p, -1)
        if m == until or not live:
            continue
        base = at(hooks.sub(m, structure.mlp_reads), ref).repeat(len(live), 1)
        mlp_ref = at(hooks.mlp_out(m), ref).repeat(len(live), 1)
        flat = delta.reshape(-1, delta.shape[-1])
        delta = (flat + mlp_change(model, structure, m, base, flat.to(base.dtype), mlp_ref)).reshape(delta.shape)
    result[live] = delta.to(result.device, result.dtype)
    return result.reshape(len(senders), B, n_p, -1)


@torch.no_grad()
def delta_snapshots(
    model: HookedModel, cache: PairCache, senders: Sequence[Sender], position: int
) -> dict[int, Tensor]:
    """The change each sender patched at ``position`` makes to the residual there, as a receiver at each layer sees it.

    ``{layer: [sender, B, 1, d_model]}`` (bfloat16, zeros for senders at or after that layer): the screen
    runs the MLP chain once per batch and position instead of once per receiver. Exact edges recompute theirs.
    """
    out: dict[int, Tensor] = {}
    _deltas(
        model, cache, senders, torch.tensor([position], device="cpu"), model.spec.n_layers, head_out_weights(model), out
    )
    return out


def first_diff(cache: PairCache) -> int:
    differ = (cache.tokens != cache.cf_tokens).any(0).nonzero()
    return int(differ[0]) if len(differ) else cache.tokens.shape[1]


@torch.no_grad()
def logits_effects(
    model: HookedModel,
    cache: PairCache,
    senders: Sequence[Sender],
    positions: Sequence[int],
    metric: Metric,
    chunk: int,
) -> Tensor:
    """Sender → logits effects ``[batch, sender]``: δ through the MLPs to the final residual, read out (no forward)."""
    seq, B = cache.tokens.shape[1], cache.tokens.shape[0]
    readout = cache.readout_positions
    pos = check_positions(positions, seq, "sender")
    changed = sorted(p for p in pos if p in readout and p >= first_diff(cache))
    out = torch.zeros(B, len(senders), device="cpu")
    if not changed or not senders:
        return out
    C = torch.tensor(changed, device="cpu")
    cols = [readout.index(p) for p in changed]
    W_O = head_out_weights(model)
    L = model.spec.n_layers
    final = cache.ref[hooks.resid_post(L - 1)][:, C]  # [B, |C|, d]
    answers = cache.all_answers
    per = max(1, chunk // B)
    for lo in range(0, len(senders), per):
        group = senders[lo : lo + per]
        delta = _deltas(model, cache, group, C, L, W_O)  # [s, B, |C|, d]
        logit_c, logp_c = position_scores(
            unembed(model, cache.structure, final[None] + delta).flatten(0, 1),
            answers[:, cols].repeat(len(group), 1),
        )
        logit = cache.clean_logit.repeat(len(group), 1).clone()
        logp = cache.clean_logp.repeat(len(group), 1).clone()
        logit[:, cols], logp[:, cols] = logit_c.to(logit.dtype), logp_c
        eff = metric(
            readout_of(logit, logp, metric),
            cache.clean.take(torch.arange(B, device=cache.clean.logit.device).repeat(len(group))),
        )
        out[:, lo : lo + len(group)] = eff.float().cpu().reshape(len(group), B).T
    return out


@torch.no_grad()
def patched_inputs(
    model: HookedModel,
    cache: PairCache,
    receiver: Receiver,
    senders: Sequence[Sender],
    positions: Sequence[int],
    delta: Tensor | None = None,
) -> tuple[list[int], Tensor | None]:
    """Step 1 without forwards: the receiver's input at the positions a sender patch changes.

    ``receiver``: resolved, downstream of every sender. ``delta``: the senders' change as the receiver sees it
    (:func:`delta_snapshots`); None computes it. Returns ``(changed, new)``: the changed positions (sorted;
    empty when the patch cannot reach the receiver) and the new input there, ``[sender, batch, |changed|, ...]``
    (None when nothing changes). :class:`UnsupportedFamilyError` when the bridge's modules do not rebuild the
    receiver's input (use the reference).
    """
    structure, ref = cache.structure, cache.ref
    seq = cache.tokens.shape[1]
    pos = check_positions(positions, seq, "sender")
    first = first_diff(cache)  # before it, both runs are identical (causal attention)
    changed = sorted(p for p in set(pos) & set(receiver.positions(seq)) if p >= first)
    lr = receiver.layer
    reads = hooks.sub(lr, structure.mlp_reads if receiver.kind == "mlp" else "hook_resid_pre")
    own = receiver_input(model, structure, receiver, ref[reads])
    if (own - ref[receiver.hook()]).abs().max() > 1e-4:
        raise UnsupportedFamilyError(
            f"on {model.spec.describe()} the receiver input rebuilt from the bridge's ln1/attn/MLP modules differs "
            f"from {receiver.hook()}, so the fast method would be wrong. ",
            "use method='reference' for this model.",
        )
    if not changed or not senders:
        return [], None
    C = torch.tensor(changed, device="cpu")
    if delta is None:
        W_O = head_out_weights(model)  # the bridge stacks it from every layer on each access: read it once
        delta = _deltas(model, cache, senders, C, lr, W_O)  # [sender, B, |C|, d_model]
    delta = delta.to(ref[reads].device, ref[reads].dtype)  # the screen's snapshots are kept on the CPU
    return changed, receiver_slice(receiver, receiver_input(model, structure, receiver, ref[reads][:, C][None] + delta))
