"""Exact sender → receiver path patching: the fast method and the plain reference.

Method (Wang et al. 2023 §3; Goldowsky-Dill et al. 2023; Zhang et al. 2024, App. B, Alg. 1),
for a sender ``s`` patched at positions ``P`` and a receiver ``r``:

1. run the reference prompt with every attention head frozen at its reference ``hook_z``,
   except ``s``, whose output at ``P`` is its counterfactual value; MLPs and norms recompute.
   Record the receiver's input ``r̃`` (``hook_q``/``hook_k``/``hook_v`` of the head or KV
   group, linear in the input; ``mlp.hook_in`` for an MLP);
2. run the reference prompt with only the receiver's input replaced by ``r̃`` (q: at the
   last position, the query that is read; k, v, MLP: every position); everything else
   recomputes; the effect is ``metric(answer readout, clean readout)`` at the last position.

The reference (:func:`reference_edges`) does exactly that: two full hooked forwards per
sender. The fast method (:func:`exact_edges`) computes the same numbers with less work:

* step 1 without forwards: with heads frozen, the change stays at the positions ``P``
  and passes only through position-wise MLPs and norms, so, with ``δ`` the residual
  change at ``P`` (as in :mod:`mathcircuits.patching.exact`)::

      δ ← P1(a_l + (z'−z) W_O) − P1(a_l)   (head sender)    δ ← mlp' − mlp   (MLP sender)
      δ ← δ + P2(MLP_m(N2(r_m + δ))) − mlp_m                (each MLP between sender and receiver)
      r̃  = W_{q|k|v}(LN1(resid_pre + δ))  or  N2(resid_mid + δ)   at P

  (the bridge's own ``ln1``/``attn.q|k|v``/MLP modules compute this, so any family
  whose hooks agree works; this is checked on every batch against the captured
  activations and refused otherwise);
* nothing to do for positions before the first token where the two prompts differ: with causal
  attention both runs are identical there, so such a patch has no effect, exactly;
* step 2 only from the first changed position: a q receiver changes nothing before the
  last position, a k/v/MLP receiver nothing before ``min(P)``, so the prefix runs once
  with a KV cache and each sender × pair row runs only the suffix, batched.

The unavoidable cost is step 2: for every sender, one forward over the changed suffix
(one token for q receivers). ``benchmarks/bench_circuit.py`` prints both methods' times.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits.circuit.components import Receiver, Sender, check_positions
from mathcircuits.circuit.pair_cache import EdgeBatch, PairCache, check_request, pair_cache, receiver_slice
from mathcircuits.circuit.reference import reference_edges
from mathcircuits.models import HookedModel, fast_paths_enabled, hooks
from mathcircuits.models.changes import attn_change, attn_pre_norm_name, mlp_change
from mathcircuits.models.families import BlockStructure, UnsupportedFamilyError
from mathcircuits.models.integrity import compare, model_dtype, probe_pairs, verify_once
from mathcircuits.models.readout import Readout
from mathcircuits.patching import METRICS, Metric

__all__ = ["check_edges", "exact_edges", "patched_inputs", "receiver_effects"]


@torch.no_grad()
def receiver_effects(
    model: HookedModel,
    cache: PairCache,
    receiver: Receiver,
    values: Tensor,
    start: int,
    metric: Metric,
    chunk: int = 8192,
) -> Float[Tensor, "sender batch"]:
    """Step 2 of the method: the effect on the answer of the receiver's input replaced by ``values``.

    Args:
        model: the hooked model.
        cache: the batch's two cached runs.
        receiver: the receiver whose input is replaced.
        values: one replacement per sender, ``[sender, batch, seq − start, ...]`` (the receiver's hook's
            slice from position ``start`` on).
        start: the first position replaced; the prefix before it runs once with a KV cache.
        metric: the effect measure.
        chunk: rows per forward (bounds memory).

    Returns:
        The effect of each sender's replacement on each pair.
    """
    bridge, tokens, answer, clean = model.bridge, cache.tokens, cache.answer, cache.clean
    n_s, B = values.shape[:2]
    past = None
    if start > 0:
        _, past = bridge(tokens[:, :start], return_type="logits_and_cache")
    suffix = tokens[:, start:]
    out = torch.empty(n_s, B)
    per = max(1, chunk // B)  # senders per forward
    for lo in range(0, n_s, per):
        vals = values[lo : lo + per]  # [s, B, S', ...]
        n = vals.shape[0]
        rows = vals.transpose(0, 1).reshape(B * n, *vals.shape[2:])  # pair-major, as the cache repeats

        def hook(act: Tensor, hook: Any, rows: Tensor = rows) -> Tensor:
            return rows.to(act.dtype) if receiver.kind == "mlp" else _put_all(act, rows, receiver.index)

        kv = None
        if past is not None:
            kv = copy.deepcopy(past)
            kv.batch_repeat_interleave(n)
        logits = bridge.run_with_hooks(
            suffix.repeat_interleave(n, 0), fwd_hooks=[(receiver.hook(), hook)], past_key_values=kv
        )[:, -1]
        patched = Readout.from_logits(logits, answer.repeat_interleave(n), metric.needs_probs)
        eff = metric(patched, clean.take(torch.arange(B).repeat_interleave(n)))
        out[lo : lo + n] = eff.float().cpu().reshape(B, n).T
    return out


def _put_all(act: Tensor, rows: Tensor, index: int) -> Tensor:
    act = act.clone()
    act[:, :, index] = rows.to(act.dtype)
    return act


def _receiver_input(model: HookedModel, structure: BlockStructure, receiver: Receiver, resid: Tensor) -> Tensor:
    """The receiver's hook value from the residual it reads (``resid_pre`` for q/k/v, the MLP's input residual)."""
    block = model.bridge.blocks[receiver.layer]
    if receiver.kind == "mlp":
        return getattr(block, structure.mlp_in_norm)(resid) if structure.mlp_in_norm else resid
    ln1 = getattr(block, "ln1", None)
    x = ln1(resid) if ln1 is not None else resid
    proj = getattr(block.attn, receiver.kind)(x)
    d_head = model.spec.d_head
    return proj.reshape(*proj.shape[:-1], -1, d_head) if proj.shape[-1] != d_head else proj


def _delta(model: HookedModel, cache: PairCache, s: Sender, P: Tensor, until: int, W_O: Tensor) -> Tensor:
    """The residual change at positions ``P`` [batch, |P|, d_model] that sender ``s`` causes before layer ``until``.

    With every head frozen, only the MLPs (and norms) between sender and receiver carry it on. ``W_O``: the
    bridge's ``[layer, head, d_head, d_model]`` output weights.
    """
    structure, ref, cf = cache.structure, cache.ref, cache.cf

    def at(name: str, store: dict[str, Tensor]) -> Tensor:
        x = store[name][:, P]
        return x.reshape(-1, *x.shape[2:])  # rows = (pair, position): the MLP chain is position-wise

    if s.kind == "head":
        dz = at(hooks.z(s.layer), cf)[:, s.head] - at(hooks.z(s.layer), ref)[:, s.head]
        pre_name = attn_pre_norm_name(structure, s.layer)
        pre = None if pre_name is None else at(pre_name, ref)
        delta = attn_change(model, structure, s.layer, pre, dz @ W_O[s.layer, s.head])
        first = s.layer + 1 if structure.parallel else s.layer  # parallel: the head's own MLP does not read it
    else:
        delta = at(hooks.mlp_out(s.layer), cf) - at(hooks.mlp_out(s.layer), ref)
        first = s.layer + 1
    for m in range(first, until):
        base = at(hooks.sub(m, structure.mlp_reads), ref)
        delta = delta + mlp_change(model, structure, m, base, delta, at(hooks.mlp_out(m), ref))
    return delta.reshape(-1, len(P), delta.shape[-1])


@torch.no_grad()
def exact_edges(
    model: HookedModel,
    cache: PairCache,
    receiver: Receiver,
    senders: Sequence[Sender],
    positions: Sequence[int],
    metric: Metric,
    chunk_rows: int = 256,
) -> EdgeBatch:
    """The same effects as :func:`reference_edges`, from the cached runs and suffix-only forwards.

    Args:
        model, cache, receiver, senders, positions, metric: as in :func:`reference_edges`.
        chunk_rows: sender × pair rows per step-2 forward (bounds memory).

    Returns:
        :class:`EdgeBatch` of per-pair effects, one column per sender.

    Raises:
        UnsupportedFamilyError: the bridge's modules do not rebuild the receiver's input (use the reference).
    """
    if not fast_paths_enabled():
        return reference_edges(model, cache, receiver, senders, positions, metric)
    verify_once(model.bridge, "circuit edges", lambda: check_edges(model))
    receiver = check_request(model, receiver, senders, cache.structure)
    B = cache.tokens.shape[0]
    changed, new = patched_inputs(model, cache, receiver, senders, positions)
    if not changed:  # nothing the receiver reads differs at the patched positions: no effect, exactly
        return EdgeBatch(effects=torch.zeros(B, len(senders)), clean_logit=cache.clean.logit)
    start = changed[0]
    base = receiver_slice(receiver, cache.ref[receiver.hook()])[:, start:]  # [B, S', ...]
    values = base[None].repeat(len(senders), *([1] * base.dim())).clone()
    values[:, :, [p - start for p in changed]] = new.to(values.dtype)
    effects = receiver_effects(model, cache, receiver, values, start, metric, chunk_rows)
    return EdgeBatch(effects=effects.T.contiguous(), clean_logit=cache.clean.logit)


@torch.no_grad()
def patched_inputs(
    model: HookedModel, cache: PairCache, receiver: Receiver, senders: Sequence[Sender], positions: Sequence[int]
) -> tuple[list[int], Tensor | None]:
    """Step 1 without forwards: the receiver's input at the positions a sender patch changes.

    Args:
        model: the hooked model.
        cache: the batch and its cached runs.
        receiver: a resolved q/k/v/mlp receiver downstream of every sender.
        senders: the senders.
        positions: where each sender is patched.

    Returns:
        ``(changed, new)``: the changed positions (sorted; empty when the patch cannot reach the receiver)
        and the receiver's new input there, ``[sender, batch, |changed|, ...]`` (None when nothing changes).

    Raises:
        UnsupportedFamilyError: the bridge's modules do not rebuild the receiver's input (use the reference).
    """
    structure, ref = cache.structure, cache.ref
    seq = cache.tokens.shape[1]
    pos = check_positions(positions, seq, "sender")
    differ = (cache.tokens != cache.cf_tokens).any(0).nonzero()
    first_diff = int(differ[0]) if len(differ) else seq  # before it, both runs are identical (causal attention)
    changed = sorted(p for p in set(pos) & set(receiver.positions(seq)) if p >= first_diff)
    lr = receiver.layer
    reads = hooks.sub(lr, structure.mlp_reads if receiver.kind == "mlp" else "hook_resid_pre")
    own = _receiver_input(model, structure, receiver, ref[reads])
    if (own - ref[receiver.hook()]).abs().max() > 1e-4:
        raise UnsupportedFamilyError(
            f"on {model.spec.describe()} the receiver input rebuilt from the bridge's ln1/attn/MLP modules differs "
            f"from {receiver.hook()}, so the fast method would be wrong. Fix: use method='reference' for this model."
        )
    if not changed or not senders:
        return [], None
    C = torch.tensor(changed)
    W_O = model.bridge.W_O  # the bridge stacks it from every layer on each access: read it once
    delta = torch.stack([_delta(model, cache, s, C, lr, W_O) for s in senders])  # [sender, B, |C|, d_model]
    return changed, receiver_slice(
        receiver, _receiver_input(model, structure, receiver, ref[reads][:, C][None] + delta)
    )


def check_edges(model: HookedModel) -> tuple[float, float]:
    """Exact against reference sender → receiver effects on probe pairs (the run-time check of :func:`exact_edges`).

    Three receivers of the last layer (a head's query, its KV group's values, the MLP's input) and three senders
    below them (a first-layer head, a middle-layer head, the first MLP), patched where the prompts differ and
    at the last position; effects in raw answer logits.

    Args:
        model: the hooked model.

    Returns:
        ``(largest difference, tolerance)``.
    """
    spec = model.spec
    if spec.n_layers < 2:  # no sender lies below a receiver
        return 0.0, 0.0
    probe = probe_pairs(spec.vocab_size)
    dev = model.device
    toks, cf = torch.tensor(probe["tokens"], device=dev), torch.tensor(probe["cf_tokens"], device=dev)
    cache = pair_cache(model, toks, cf, torch.tensor(probe["answer_token"], device=dev))
    last, seq = spec.n_layers - 1, toks.shape[1]
    senders = [Sender("head", 0, 0), Sender("head", last // 2, spec.n_heads - 1), Sender("mlp", 0)]
    receivers = [Receiver("q", last, 0), Receiver("v", last, 0, by_group=True), Receiver("mlp", last)]
    metric = METRICS["logit_diff"]
    fast, plain = [], []
    for r in receivers:
        a = exact_edges(model, cache, r, senders, [seq - 3, seq - 1], metric)
        b = reference_edges(model, cache, r, senders, [seq - 3, seq - 1], metric)
        fast.append(a.effects + a.clean_logit[:, None])
        plain.append(b.effects + b.clean_logit[:, None])
    return compare(torch.cat(fast), torch.cat(plain), model_dtype(model))
