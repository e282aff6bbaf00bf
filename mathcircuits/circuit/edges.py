"""Exact sender → receiver path patching: the fast method and the plain reference.

Method (Wang et al. 2023 §3; Goldowsky-Dill et al. 2023; Zhang et al. 2024, App. B, Alg. 1), for a
sender ``s`` patched at positions ``P`` and a receiver ``r``:

1. run the reference prompt with every head frozen at its reference ``hook_z`` except ``s``, whose
   output at ``P`` is its counterfactual value (MLPs and norms recompute); record the receiver's input
   ``r̃`` (``hook_q``/``hook_k``/``hook_v`` of the head or KV group; ``mlp.hook_in`` for an MLP);
2. run the reference prompt with only the receiver's input replaced by ``r̃`` (q: at the last position;
   k, v, MLP: every position); the effect is ``metric(answer readout, clean readout)``.

:func:`reference_edges` does exactly that, two full forwards per sender. :func:`exact_edges` computes
the same numbers with less work:

* step 1 without forwards: with heads frozen, the change stays at ``P`` and passes only through
  position-wise MLPs and norms (as in :mod:`mathcircuits.patching.exact`)::

      δ ← P1(a_l + (z'−z) W_O) − P1(a_l)   (head sender)    δ ← mlp' − mlp   (MLP sender)
      δ ← δ + P2(MLP_m(N2(r_m + δ))) − mlp_m                (each MLP between sender and receiver)
      r̃  = W_{q|k|v}(LN1(resid_pre + δ))  or  N2(resid_mid + δ)   at P

  computed by the bridge's own modules, checked on every batch against the captured activations and
  refused otherwise;
* positions before the first difference between the prompts: identical runs (causal), no effect, exactly;
* step 2 only from the first changed position (q: the last; k/v/MLP: ``min(P)``): the prefix runs once
  with a KV cache and each sender × pair row runs only the suffix, batched.

Step 2's suffix forward per sender is the unavoidable cost (``benchmarks/bench_circuit.py`` times both).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits.circuit.chain import logits_effects, patched_inputs
from mathcircuits.circuit.components import Receiver, Sender
from mathcircuits.circuit.pair_cache import EdgeBatch, PairCache, check_request, pair_cache, receiver_slice
from mathcircuits.circuit.reference import reference_edges
from mathcircuits.models import (
    HookedModel,
    compare,
    fast_paths_enabled,
    model_depth,
    probe_pairs,
    verify_once,
)
from mathcircuits.patching.metrics import METRICS, Metric, answer_readout

__all__ = [
    "exact_edges",
]


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

    ``values``: one replacement per sender, ``[sender, batch, seq − start, ...]``, the receiver hook's slice
    from ``start`` on; the prefix before ``start`` runs once with a KV cache. Read at every answer position.
    """
    bridge, tokens, answers, clean = model.bridge, cache.tokens, cache.all_answers, cache.clean
    n_s, B = values.shape[:2]
    n_ans = answers.shape[1]
    past = cache.kv(model, start) if start > 0 else None
    suffix = tokens[:, start:]
    out = torch.empty(n_s, B, device="cpu")
    per = max(1, chunk // B)  # senders per forward
    for lo in range(0, n_s, per):
        vals = values[lo : lo + per]  # [s, B, S', ...]
        n = vals.shape[0]
        rows = vals.transpose(0, 1).reshape(B * n, *vals.shape[2:])  # pair-major, as the cache repeats

        def hook(act: Tensor, hook: Any, rows: Tensor = rows) -> Tensor:
            return rows.to(act.device, act.dtype) if receiver.kind == "mlp" else _put_all(act, rows, receiver.index)

        kv = None
        if past is not None:
            kv = copy.deepcopy(past)
            kv.batch_repeat_interleave(n)
        logits = bridge.run_with_hooks(
            suffix.repeat_interleave(n, 0), fwd_hooks=[(receiver.hook(), hook)], past_key_values=kv
        )[:, -n_ans:]
        patched = answer_readout(logits, answers.repeat_interleave(n, 0), metric)
        eff = metric(patched, clean.take(torch.arange(B, device=clean.logit.device).repeat_interleave(n)))
        out[lo : lo + n] = eff.float().cpu().reshape(B, n).T
    return out


def _put_all(act: Tensor, rows: Tensor, index: int) -> Tensor:
    act = act.clone()
    act[:, :, index] = rows.to(act.device, act.dtype)
    return act


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

    A logits receiver needs no forward at all: the sender's change passes the MLPs to the final residual
    (heads frozen), where only the readout changes. ``chunk_rows``: sender × pair rows per step-2 forward.
    :class:`UnsupportedFamilyError` when the bridge's modules do not rebuild the receiver's input (use the
    reference).
    """
    if not fast_paths_enabled():
        return reference_edges(model, cache, receiver, senders, positions, metric)
    verify_once(model.bridge, "circuit edges", lambda: check_edges(model))
    receiver = check_request(model, receiver, senders, cache.structure)
    B = cache.tokens.shape[0]
    if receiver.kind == "logits":
        return EdgeBatch(logits_effects(model, cache, senders, positions, metric, chunk_rows), cache.clean.logit)
    changed, new = patched_inputs(model, cache, receiver, senders, positions)
    if not changed:  # nothing the receiver reads differs at the patched positions: no effect, exactly
        return EdgeBatch(effects=torch.zeros(B, len(senders), device="cpu"), clean_logit=cache.clean.logit)
    start = min(changed[0], cache.readout_positions[0])  # the suffix run must reach every answer position
    base = receiver_slice(receiver, cache.ref[receiver.hook()])[:, start:]  # [B, S', ...]
    values = base[None].repeat(len(senders), *([1] * base.dim())).clone()
    values[:, :, [p - start for p in changed]] = new.to(values.dtype)
    effects = receiver_effects(model, cache, receiver, values, start, metric, chunk_rows)
    return EdgeBatch(effects=effects.T.contiguous(), clean_logit=cache.clean.logit)


def check_edges(model: HookedModel) -> tuple[float, float]:
    """Exact against reference sender → receiver effects on probe pairs (the run-time check of :func:`exact_edges`).

    Four receivers (the last layer's first query head, its KV group's values, its MLP's input, the logits),
    three senders below them (first-layer head, middle-layer head, first MLP), patched where the prompts
    differ and at the last positions; two-token answers, in the whole answer's log-probability. Returns
    ``(largest difference, tolerance)``.
    """
    spec = model.spec
    if spec.n_layers < 2:  # no sender lies below a receiver
        return 0.0, 0.0
    probe = probe_pairs(spec.vocab_size)
    dev = model.device
    toks, cf = torch.tensor(probe.tokens, device=dev), torch.tensor(probe.cf_tokens, device=dev)
    answers = torch.tensor(probe.answer_tokens, device=dev)
    cache = pair_cache(model, toks, cf, answers[:, 0], answers=answers)
    last, seq = spec.n_layers - 1, cache.tokens.shape[1]
    senders = [Sender("head", 0, 0), Sender("head", last // 2, spec.n_heads - 1), Sender("mlp", 0)]
    receivers = [
        Receiver("q", last, 0),
        Receiver("v", last, 0, by_group=True),
        Receiver("mlp", last),
        Receiver("logits"),
    ]
    metric = METRICS["answer_logprob"]  # every answer position read: the first-token metrics read a subset of it
    fast, plain = [], []
    for r in receivers:
        where = [seq - 4, seq - 2, seq - 1]  # the differing token, the last prompt token, the answer position
        a = exact_edges(model, cache, r, senders, where, metric)
        b = reference_edges(model, cache, r, senders, where, metric)
        base = cache.clean.value(metric.target)[:, None].float().cpu()  # effects are results: on the CPU
        fast.append(a.effects + base)
        plain.append(b.effects + base)
    return compare(torch.cat(fast), torch.cat(plain), model.dtype, model_depth(model))
