"""Exact path patching from every head and MLP to the logits, at the cost floor.

Path patching (Wang et al. 2023; Zhang et al. 2024 §3.2) measures a *sender*'s (head or MLP) direct
effect through the residual stream and the MLPs, not through other heads: the sender takes its
counterfactual value at the last position, every other head is frozen, MLPs and norms recompute.

Why two cached runs suffice: with every other head frozen, the patch at the last position ``T`` changes
only the residual at ``T``, and only through the MLPs (and norms) from the sender's layer on. With ``δ``
that change and ``N2``/``P1``/``P2`` the family's MLP input norm and output norms
(:mod:`mathcircuits.models.families`)::

    head (l, h):  δ   = P1(a_l + (z'_{l,h} − z_{l,h}) W_O^{l,h}) − P1(a_l)     (a_l: attention output before P1)
    MLP l:        δ   = mlp'_l − mlp_l                                         (hook_mlp_out, after P2)
    layer m:      δ  ← δ + P2(MLP_m(N2(r_m + δ))) − mlp_m                      (MLP recomputes; attention frozen)
    logits        = cap(unembed(LN_f(resid_post_{L−1} + δ)))

Primes mark the counterfactual run, the rest is the reference run's cache at ``T``. ``r_m`` is
``resid_mid_m``, or ``resid_pre_m`` in *parallel* blocks (Pythia, GPT-J, Phi), where a head's δ enters
*after* its own layer's MLP; ``cap`` is Gemma 2's soft cap. Cost: two forwards plus one MLP on one vector
per sender, pair and later layer (batched, chunked). GQA does not matter: ``hook_z`` and ``W_O`` are per
query head. Equal to :mod:`.reference` on every family (``tests/test_families.py``, ≤ 1e-4).

Every answer token (``answer_logprob``): the prompts are teacher-forced and the sender is patched at
every answer position too; each (pair, position) is its own chain (``n_answer`` times the rows, no extra
forwards), and the answer's log-probability is the sum over the positions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mathcircuits.data.pairs import PairBatch
from mathcircuits.models import (
    HookedModel,
    PrefixCaches,
    Readout,
    attn_change,
    attn_pre_norm_name,
    head_out_weight,
    hooks,
    mlp_change,
    readout,
    token_scores,
)
from mathcircuits.models.families import BlockStructure, block_structure
from mathcircuits.patching.cache import LastPositionCache, last_position_caches
from mathcircuits.patching.metrics import Metric
from mathcircuits.patching.scan import BatchEffects, Senders, scan_answers

__all__: list[str] = []


@torch.no_grad()
def exact_scan(
    model: HookedModel,
    batch: PairBatch,
    senders: Senders,
    metric: Metric,
    *,
    chunk_rows: int = 8192,
    progress: bool = False,
    cache: LastPositionCache | None = None,
    prefixes: PrefixCaches | None = None,
) -> BatchEffects:
    """Effects of every sender for one batch of equal-length pairs, from two cached forwards.

    ``chunk_rows`` bounds the rows per MLP call; ``progress`` is unused (one batch is one step);
    ``cache``: the batch's two forwards if already run (:func:`last_position_caches`, same answers);
    ``prefixes``: prefix KV caches shared by the batches of one call. Senders not scanned get NaN.
    """
    structure = block_structure(model)
    answers = scan_answers(batch, metric)
    if cache is None:
        cache = last_position_caches(
            model, batch.tokens, batch.cf_tokens, structure=structure, answers=answers, prefixes=prefixes
        )
    spec = model.spec
    L, H = spec.n_layers, spec.n_heads
    ref, cf = cache.ref, cache.cf
    answer = batch.answer
    B = answer.shape[0]
    R = B * cache.positions  # the chain's rows: (pair, position), row = pair · positions + position
    # live rows: the change δ of the last-position residual, and which (pair, position) row / sender each row
    # belongs to. They follow the chain from block to block: on a split model they move to each block's device,
    # while the cached activations stay on the device of the layer that made them.
    device = model.layer_device(0)
    pairs = torch.arange(R, device=device)
    delta = torch.zeros(0, spec.d_model, dtype=ref[hooks.resid_post(L - 1)].dtype, device=device)
    row_pair = torch.zeros(0, dtype=torch.long, device=device)
    row_sender: list[tuple[str, int, int]] = []  # (kind, layer, head), one per block of R rows

    def add_rows(new: Tensor, n_blocks: int) -> None:
        nonlocal delta, row_pair
        delta = torch.cat([delta, new.to(device)])
        row_pair = torch.cat([row_pair, pairs.repeat(n_blocks)])

    def add_heads(layer: int) -> None:
        chosen = [h for h in range(H) if senders.wants("head", layer, h)]
        if not chosen:
            return
        dz = cf[hooks.z(layer)] - ref[hooks.z(layer)]  # [R, H, d_head]
        change = torch.einsum("bhd,hdm->hbm", dz, head_out_weight(model, layer))
        if len(chosen) < H:  # Senders.only: the chain carries just these heads' rows
            change = change[torch.tensor(chosen, device=change.device)]
        change = change.reshape(len(chosen) * R, -1)
        pre_name = attn_pre_norm_name(structure, layer)
        pre = None if pre_name is None else ref[pre_name].repeat(len(chosen), 1)
        add_rows(attn_change(model, structure, layer, pre, change), len(chosen))
        row_sender.extend(("head", layer, h) for h in chosen)

    def through_mlp(layer: int) -> None:
        nonlocal delta
        if delta.shape[0]:
            base = ref[hooks.sub(layer, structure.mlp_reads)][row_pair]
            mlp_ref = ref[hooks.mlp_out(layer)][row_pair]
            delta = delta + mlp_change(model, structure, layer, base, delta, mlp_ref, chunk_rows).to(device)

    for layer in range(L):
        if model.layer_device(layer) != device:  # a split model: the rows move to this block's device
            device = model.layer_device(layer)
            delta, row_pair, pairs = delta.to(device), row_pair.to(device), pairs.to(device)
        if structure.parallel:  # the MLP reads resid_pre: this layer's heads do not pass through it
            through_mlp(layer)
            if senders.heads:
                add_heads(layer)
        else:
            if senders.heads:
                add_heads(layer)
            through_mlp(layer)
        if senders.wants("mlp", layer):
            add_rows(cf[hooks.mlp_out(layer)] - ref[hooks.mlp_out(layer)], 1)
            row_sender.append(("mlp", layer, -1))

    final_ref = ref[hooks.resid_post(L - 1)]
    final = final_ref[row_pair] + delta
    # the clean, the patched and the counterfactual answer come from the same readout (final norm, float32
    # unembedding), so in bf16 no offset between the bridge's logits and this readout enters an effect
    every = torch.arange(R, device=device)
    clean = chain_readout(model, structure, final_ref, every, batch, answers, metric)
    patched = chain_readout(model, structure, final, row_pair, batch, answers, metric)
    counterfactual = chain_readout(model, structure, cf[hooks.resid_post(L - 1)], every, batch, answers, metric)
    total = metric(counterfactual, clean)  # the counterfactual prompt's own effect
    eff = metric(patched, clean.take(torch.arange(B, device=clean.logit.device).repeat(len(row_sender))))
    eff = eff.float().cpu()
    head_eff = torch.full((B, L, H), float("nan"), device="cpu")
    mlp_eff = torch.full((B, L), float("nan"), device="cpu")
    for k, (kind, layer, head) in enumerate(row_sender):
        block = eff[k * B : (k + 1) * B]
        if kind == "head":
            head_eff[:, layer, head] = block
        else:
            mlp_eff[:, layer] = block
    return BatchEffects(
        heads=head_eff,
        mlps=mlp_eff,
        clean_logit=clean.logit.cpu(),
        total=total.float().cpu(),
        excluded=metric.excluded(clean).cpu(),
    )


def chain_readout(
    model: HookedModel,
    structure: BlockStructure,
    final: Tensor,
    rows: Tensor,
    batch: PairBatch,
    answers: Tensor | None,
    metric: Metric,
) -> Readout:
    """The readout of final residuals, one per chain row, each row's pair's answer read the one way every scan does.

    ``rows`` is each residual's cache row: a pair, or with ``answers`` a (pair, position),
    ``pair · n_answer + j``, in blocks of ``pairs × n_answer`` rows per sender; the whole answer's
    log-probability is then the sum over the positions.
    """
    if answers is None:
        return readout(model, structure, final, batch.answer.to(rows.device)[rows], metric.needs_probs)
    B, k = answers.shape
    logit, logp = token_scores(model, structure, final, answers.reshape(-1).to(rows.device)[rows])
    logit, logp = logit.reshape(-1, B, k), torch.as_tensor(logp).reshape(-1, B, k)
    return Readout(logit[..., 0].reshape(-1), logp[..., 0].exp().reshape(-1), logp.sum(-1).reshape(-1))
