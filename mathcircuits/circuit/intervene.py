"""The circuit run: the model with everything outside a circuit ablated, at the nodes and, when asked, at the edges.

Nodes are components at positions (``L14.H2@last``, ``MLP3@op``). The token embeddings stay clean (every
circuit contains them, as in Wang et al. 2023) unless ``Wiring(input=True)`` makes the input a sender
(MIB's graph). Only query positions are touched: the prefix is identical in every prompt of a template.
At a query position ``p``:

* **node level**: a head (and with ``mlps="ablate"`` an MLP) that is not a circuit node at ``p`` outputs
  its *ablated value*; circuit nodes compute normally at their own positions only (Wang et al. 2023, §4);
* **edge level**: each circuit node also reads only the circuit nodes it has edges from (Hanna et al.
  2024). With ``Δ_s = out_s − out_s^abl`` (``(z_s − z_s^abl) W_O`` for a head), a receiver ``r`` reads::

      input_r[p] = f_r( resid[p] − Σ_{s ∈ C at p, s upstream of r, (s → r) ∉ E} Δ_s )

  ``f_r``: ``W_Q`` of one head at its position, ``W_K``/``W_V`` of a KV group at every position (the union
  of its heads' edges), the MLP's input norm, or final norm and unembedding at the readout positions.

The ablated value is the paired counterfactual's (``resample``, discovery's intervention) or a
position-aligned mean over counterfactual prompts of the same template and prompt length, never of an
answer property (``position_mean``; Wang et al.'s ABC mean). ``mlps="keep"``: MLPs always compute
(Wang et al.'s IOI circuit); ``"ablate"``: they are nodes (Hanna et al. 2024). The score is the whole
answer's log-probability; an empty circuit under ``resample`` is exactly the counterfactual run.

Only the query suffix runs, on the prefix's KV cache (:func:`check_circuit_run` compares it with the
plain forward before first use). Edge level needs additive head writes (``z W_O``), so families with a
norm after attention (Gemma 2/3, OLMo 2) are refused there; node level works on every family.

Usage::

    values = resample_values(model, batch)
    logp = circuit_logprob(model, batch, values, [wiring_of(circuit)])     # [1, batch]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.circuit.batches import CircuitBatch
from mathcircuits.circuit.pair_cache import position_scores
from mathcircuits.circuit.run_hooks import CircuitRun
from mathcircuits.circuit.wiring import (
    LOGITS,
    MLP_MODES,
    AblationValues,
    Wiring,
    prefix_kv,
    record_values,
    without_mlps,
)
from mathcircuits.models import (
    HookedModel,
    PrefixCaches,
    compare,
    fast_paths_enabled,
    model_depth,
    probe_pairs,
    repeat_cache,
    verify_once,
)
from mathcircuits.models.families import UnsupportedFamilyError, block_structure

#: A circuit run's score of each row from the logits at the answer's readout positions and the answer's tokens.
RunScore: TypeAlias = Callable[[Tensor, Tensor], Tensor]

__all__: list[str] = []


def _check_edges_supported(model: HookedModel) -> None:
    structure = block_structure(model)
    if structure.attn_out_norm is not None:
        raise UnsupportedFamilyError(
            f"{model.spec.describe()} normalises attention's output before the residual add, so one head's write is "
            "not additive and an edge-level run is undefined. ",
            "score its heads and MLPs at node level instead (MIB's curves: node_scores and mib_node_scores; "
            "each sender to the logits: path_patch), or find edges on a "
            "family whose attention output enters the residual stream unnormalised (Llama, Qwen2, GPT-2).",
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
    store: PrefixCaches | None = None,
    readout: RunScore = answer_logprob,
) -> Float[Tensor, "wiring batch"]:
    """The whole answer's log-probability of each pair under each wiring (see the module docstring).

    ``values``: the ablated values at the query positions (:func:`resample_values`, or a pool mean).
    ``chunk_rows``: wiring × pair rows per forward. ``fast``: only the query suffix on the prefix's KV
    cache (exact). ``store``: prefix KV caches shared across calls. ``readout``: another score,
    ``(logits [rows, n_answer, vocab], answers [rows, n_answer]) → [rows]``, rows wiring-major. Returns
    ``[wiring, batch]`` in nats (or the readout's scores).
    """
    if mlps not in MLP_MODES:
        raise FixableValueError(f"mlps {mlps!r} is unknown. ", f"use one of {list(MLP_MODES)}.")
    if any(w.edges is not None for w in wirings):
        _check_edges_supported(model)
    if any(w.input for w in wirings) and values.embed is None:
        raise FixableValueError(
            "a wiring with the input as a sender needs the counterfactual's embeddings. ",
            "ablation values from resample_values (a pool mean has none).",
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
        run = CircuitRun(model, batch, values, chunk, start)
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

    An edge-level wiring (a last-layer head reading a first-layer head through its value, the first MLP
    without edges) and a node-level one, values resampled. Returns ``(largest difference, tolerance)``.
    """
    spec = model.spec
    probe = probe_pairs(spec.vocab_size)
    dev = model.device
    answers = torch.tensor(probe.answer_tokens, device=dev)
    toks = torch.cat([torch.tensor(probe.tokens, device=dev), answers[:, :-1]], 1)
    cf = torch.cat([torch.tensor(probe.cf_tokens, device=dev), answers[:, :-1]], 1)
    n = len(probe.tokens[0])
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
    return compare(fast, plain, model.dtype, model_depth(model))
