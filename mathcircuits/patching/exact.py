"""Exact path patching from every head and MLP to the logits, at the cost floor.

Path patching (Wang et al. 2023; Zhang et al. 2024 §3.2) asks how much one
*sender* (an attention head or an MLP) affects the output directly, through
the residual stream and the MLPs, but not through other heads: the sender's
output at the last position is replaced by its value on the counterfactual
prompt, every other attention head is frozen at its reference value, MLPs and
norms recompute, and we read the correct answer's raw logit.

Why two cached runs suffice. With all other heads frozen, the patch at the
last position ``T`` changes only the residual stream at ``T`` (attention is the
only thing that moves information between positions, and it is frozen), and
it changes it only through the MLPs (and their norms) of the sender's layer
onwards. Writing ``δ`` for the patch's change of the residual at ``T``::

    head (l, h):  δ_l  = (z'_{l,h} − z_{l,h}) W_O^{l,h}          added to resid_mid_l
    MLP l:        δ_l  = mlp'_l − mlp_l                          added to resid_post_l
    layer m ≥ l:  r    = resid_mid_m + δ
                  δ   ← δ + MLP_m(LN2_m(r)) − mlp_m               (MLP recomputes; attention frozen)
    logits        = unembed(LN_f(resid_post_{L−1} + δ))

where primes mark the counterfactual run and everything unprimed is cached
from the reference run at position ``T``. So the whole scan costs the two
forward passes plus, for each sender and pair, one MLP on a single vector per
downstream layer. We batch every sender × pair that is "live" at a layer into
one MLP call, chunked to bound memory. GQA does not matter here: ``hook_z``
is per query head, and ``W_O`` maps each query head's output.

Usage::

    result = path_patch(model, dataset)                # all heads and MLPs
    result.top_heads(10)

Equality with one full hooked forward per sender is tested in
``tests/test_patching.py`` (max abs difference ≤ 1e-4).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import torch
from torch import Tensor

from mathcircuits.patching._common import capture, check_dataset, iter_batches, metric_from_logits
from mathcircuits.patching.result import METRICS, PatchingResult

__all__ = ["path_patch", "last_position_caches"]


def _names(n_layers: int) -> list[str]:
    out = []
    for l in range(n_layers):
        out += [f"blocks.{l}.attn.hook_z", f"blocks.{l}.hook_resid_mid", f"blocks.{l}.hook_mlp_out", f"blocks.{l}.hook_attn_out"]
    out.append(f"blocks.{n_layers - 1}.hook_resid_post")
    return out


def last_position_caches(model: Any, tokens: Tensor, cf_tokens: Tensor, position: int = -1) -> dict[str, Any]:
    """Reference and counterfactual activations at ``position`` (the two forward passes of the method)."""
    n_layers = model.spec.n_layers
    names = _names(n_layers)
    logits, ref = capture(model.bridge, tokens, names, position)
    cf_names = [n for n in names if n.endswith(("hook_z", "hook_mlp_out"))]
    _, cf = capture(model.bridge, cf_tokens, cf_names, position)
    return {"logits": logits, "ref": ref, "cf": cf}


def _readout(bridge: Any, resid: Tensor, answer: Tensor, need_probs: bool) -> tuple[Tensor, Tensor | None]:
    """Answer logit (and probability) from final residual vectors [rows, d_model]."""
    normed = bridge.ln_final(resid)
    if need_probs:
        logits = bridge.unembed(normed)
        return logits.gather(-1, answer[:, None])[:, 0], torch.softmax(logits.float(), -1).gather(-1, answer[:, None])[:, 0]
    w = bridge.W_U[:, answer].T  # [rows, d_model]
    out = (normed * w).sum(-1)
    b_u = getattr(bridge, "b_U", None)
    if b_u is not None and torch.is_tensor(b_u):
        out = out + b_u[answer]
    return out, None


def _mlp(bridge: Any, layer: int, resid_mid: Tensor, chunk_rows: int) -> Tensor:
    block = bridge.blocks[layer]
    if resid_mid.shape[0] <= chunk_rows:
        return block.mlp(block.ln2(resid_mid))
    return torch.cat([block.mlp(block.ln2(c)) for c in resid_mid.split(chunk_rows)])


@torch.no_grad()
def _scan_batch(model: Any, caches: dict[str, Any], answer: Tensor, heads: bool, mlps: bool, metric: str, chunk_rows: int) -> tuple[Tensor, Tensor]:
    """Effects [batch, layer, head] and [batch, layer] for one batch of equal-length pairs."""
    bridge, spec = model.bridge, model.spec
    L, H = spec.n_layers, spec.n_heads
    ref, cf = caches["ref"], caches["cf"]
    B = answer.shape[0]
    need_probs = metric == "prob_change"
    clean_logit = caches["logits"].gather(-1, answer[:, None])[:, 0]
    clean_p = torch.softmax(caches["logits"].float(), -1).gather(-1, answer[:, None])[:, 0] if need_probs else None
    W_O = bridge.W_O  # [layer, head, d_head, d_model]

    # Live rows: delta of the residual at the last position, with bookkeeping of who they belong to.
    delta = torch.zeros(0, spec.d_model, dtype=caches["logits"].dtype, device=answer.device)
    row_batch = torch.zeros(0, dtype=torch.long, device=answer.device)  # which pair
    row_sender: list[tuple[str, int, int]] = []  # (kind, layer, head) per block of B rows
    for layer in range(L):
        if heads:
            dz = cf[f"blocks.{layer}.attn.hook_z"] - ref[f"blocks.{layer}.attn.hook_z"]  # [B, H, d_head]
            new = torch.einsum("bhd,hdm->hbm", dz, W_O[layer]).reshape(H * B, -1)
            delta = torch.cat([delta, new])
            row_batch = torch.cat([row_batch, torch.arange(B, device=answer.device).repeat(H)])
            row_sender += [("head", layer, h) for h in range(H)]
        if delta.shape[0]:
            mid = ref[f"blocks.{layer}.hook_resid_mid"][row_batch] + delta
            delta = delta + _mlp(bridge, layer, mid, chunk_rows) - ref[f"blocks.{layer}.hook_mlp_out"][row_batch]
        if mlps:
            dm = cf[f"blocks.{layer}.hook_mlp_out"] - ref[f"blocks.{layer}.hook_mlp_out"]
            delta = torch.cat([delta, dm])
            row_batch = torch.cat([row_batch, torch.arange(B, device=answer.device)])
            row_sender.append(("mlp", layer, -1))
    final = ref[f"blocks.{L - 1}.hook_resid_post"][row_batch] + delta
    logit, prob = _readout(bridge, final, answer[row_batch], need_probs)
    eff = metric_from_logits(metric, logit, clean_logit[row_batch], prob, clean_p[row_batch] if clean_p is not None else None)
    head_eff = torch.full((B, L, H), float("nan"))
    mlp_eff = torch.full((B, L), float("nan"))
    for k, (kind, layer, head) in enumerate(row_sender):
        block = eff[k * B : (k + 1) * B].float().cpu()
        if kind == "head":
            head_eff[:, layer, head] = block
        else:
            mlp_eff[:, layer] = block
    return head_eff, mlp_eff


def _check_args(model: Any, senders: Sequence[str], metric: str) -> tuple[bool, bool]:
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r} is unknown. Fix: use one of {METRICS}.")
    bad = [s for s in senders if s not in ("heads", "mlps")]
    if bad or not senders:
        raise ValueError(f"senders {list(senders)} are not understood. Fix: use ('heads',), ('mlps',) or ('heads', 'mlps').")
    return "heads" in senders, "mlps" in senders


def path_patch(
    model: Any,
    dataset: Any,
    senders: Sequence[str] = ("heads", "mlps"),
    metric: str = "relative_logit",
    method: str = "exact",
    batch_size: int = 16,
    chunk_rows: int = 8192,
    keep_per_pair: bool = False,
    progress: bool = False,
) -> PatchingResult:
    """Path-patch every head and/or MLP to the logits at the last position.

    ``method``: ``"exact"`` (the last-position shortcut, default), ``"reference"``
    (one full hooked forward per sender; slow, for checking) or
    ``"attribution"`` (first-order gradient approximation; a fast screen).
    """
    from tqdm.auto import tqdm

    heads, mlps = _check_args(model, senders, metric)
    check_dataset(dataset, model.spec)
    if method == "reference":
        from mathcircuits.patching.reference import reference_scan_batch as scan
    elif method == "attribution":
        from mathcircuits.patching.attribution import attribution_scan_batch as scan
    elif method == "exact":
        scan = None
    else:
        raise ValueError(f"method {method!r} is unknown. Fix: use 'exact', 'reference' or 'attribution'.")
    spec = model.spec
    t0 = time.perf_counter()
    n = len(dataset)
    all_heads = torch.full((n, spec.n_layers, spec.n_heads), float("nan"))
    all_mlps = torch.full((n, spec.n_layers), float("nan"))
    clean_sum = 0.0
    batches = iter_batches(dataset, batch_size, model.device)
    for batch in tqdm(batches, disable=not progress, desc=f"path patching ({method})"):
        if scan is None:
            caches = last_position_caches(model, batch.tokens, batch.cf_tokens)
            h, m = _scan_batch(model, caches, batch.answer, heads, mlps, metric, chunk_rows)
            clean = caches["logits"].gather(-1, batch.answer[:, None])[:, 0]
        else:
            h, m, clean = scan(model, batch, heads, mlps, metric, progress=progress)
        all_heads[batch.idx] = h
        all_mlps[batch.idx] = m
        clean_sum += float(clean.sum())
    ops = sorted(set(dataset["operation"])) if "operation" in dataset.column_names else []
    pair_ids = list(dataset["pair_id"]) if "pair_id" in dataset.column_names else list(range(n))
    return PatchingResult(
        head_effects=all_heads.mean(0),
        mlp_effects=all_mlps.mean(0),
        metric=metric,
        method=method,
        model=spec.to_dict(),
        n_pairs=n,
        pair_ids=pair_ids,
        operations=ops,
        clean_logit_mean=clean_sum / n,
        per_pair_heads=all_heads if keep_per_pair else None,
        per_pair_mlps=all_mlps if keep_per_pair else None,
        seconds=time.perf_counter() - t0,
        settings={"senders": list(senders), "batch_size": batch_size, "chunk_rows": chunk_rows},
    )
