"""Attribution patching: a first-order screen for the same path-patching effects.

Attribution patching (Nanda 2023; Syed et al. 2023) replaces each patch by a
linear estimate, ``effect ≈ (a' − a) · ∂metric/∂a``. Here the gradient is taken
along the *same path* that exact path patching measures: the last-position
residual stream through the MLPs and norms, with every attention head frozen.
We rebuild that chain from the reference run's cached activations, add a zero
"probe" to the residual after each attention block and after each MLP, and
one backward pass gives the gradient of the answer logit at every layer. Each
head's estimate is its counterfactual change ``(z' − z) W_O`` dotted with the
gradient at its layer; each MLP's is ``mlp' − mlp`` dotted with the gradient
after it. Cost: the two forward passes plus one last-position chain forward
and backward for all senders together.

It is exact when the MLP chain is linear in the patch, and otherwise a ranking
screen: :func:`compare_rankings` reports Spearman correlation and top-k
overlap against the exact method.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mathcircuits.patching._common import PairBatch
from mathcircuits.patching.exact import _readout, last_position_caches

__all__ = ["attribution_scan_batch", "compare_rankings"]


def attribution_scan_batch(model: Any, batch: PairBatch, heads: bool, mlps: bool, metric: str, progress: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    bridge, spec = model.bridge, model.spec
    L, H = spec.n_layers, spec.n_heads
    caches = last_position_caches(model, batch.tokens, batch.cf_tokens)
    ref, cf = caches["ref"], caches["cf"]
    answer = batch.answer
    clean_logits = caches["logits"]
    clean = clean_logits.gather(-1, answer[:, None])[:, 0]
    need_probs = metric == "prob_change"
    with torch.enable_grad():
        probes_attn = [torch.zeros_like(ref[f"blocks.{l}.hook_resid_mid"], requires_grad=True) for l in range(L)]
        probes_mlp = [torch.zeros_like(ref[f"blocks.{l}.hook_resid_mid"], requires_grad=True) for l in range(L)]
        delta = torch.zeros_like(ref["blocks.0.hook_resid_mid"])
        for l in range(L):
            delta = delta + probes_attn[l]
            mid = ref[f"blocks.{l}.hook_resid_mid"] + delta
            block = bridge.blocks[l]
            delta = delta + block.mlp(block.ln2(mid)) - ref[f"blocks.{l}.hook_mlp_out"] + probes_mlp[l]
        logit, prob = _readout(bridge, ref[f"blocks.{L - 1}.hook_resid_post"] + delta, answer, need_probs)
        target = prob if need_probs else logit
        grads = torch.autograd.grad(target.sum(), probes_attn + probes_mlp)
    g_attn, g_mlp = grads[:L], grads[L:]
    B = answer.shape[0]
    head_eff = torch.full((B, L, H), float("nan"))
    mlp_eff = torch.full((B, L), float("nan"))
    with torch.no_grad():
        W_O = bridge.W_O
        clean_p = torch.softmax(clean_logits.float(), -1).gather(-1, answer[:, None])[:, 0]
        for l in range(L):
            if heads:
                dz = cf[f"blocks.{l}.attn.hook_z"] - ref[f"blocks.{l}.attn.hook_z"]
                d_resid = torch.einsum("bhd,hdm->bhm", dz, W_O[l])
                est = torch.einsum("bhm,bm->bh", d_resid, g_attn[l])
                head_eff[:, l] = _scale(est, metric, clean, clean_p).float().cpu()
            if mlps:
                dm = cf[f"blocks.{l}.hook_mlp_out"] - ref[f"blocks.{l}.hook_mlp_out"]
                est = (dm * g_mlp[l]).sum(-1)
                mlp_eff[:, l] = _scale(est, metric, clean[:, None] if est.ndim > 1 else clean, clean_p).float().cpu()
    return head_eff, mlp_eff, clean


def _scale(est: Tensor, metric: str, clean: Tensor, clean_p: Tensor) -> Tensor:
    """Turn a first-order change of the logit (or probability) into the chosen metric."""
    if metric == "relative_logit":
        return est / (clean[:, None] if est.ndim > 1 and clean.ndim == 1 else clean)
    return est


def compare_rankings(approx: Any, exact: Any, k: int = 10) -> dict[str, float]:
    """Spearman correlation of head effects and top-k overlap between two PatchingResults."""
    from scipy.stats import spearmanr

    a = approx.head_effects.flatten()
    e = exact.head_effects.flatten()
    ok = torch.isfinite(a) & torch.isfinite(e)
    rho = float(spearmanr(a[ok].numpy(), e[ok].numpy()).statistic)
    top_a = set(torch.argsort(a.nan_to_num(nan=float("inf")))[:k].tolist())
    top_e = set(torch.argsort(e.nan_to_num(nan=float("inf")))[:k].tolist())
    out = {"spearman_heads": rho, f"top{k}_overlap": len(top_a & top_e) / k}
    am, em = approx.mlp_effects, exact.mlp_effects
    okm = torch.isfinite(am) & torch.isfinite(em)
    if okm.sum() > 2:
        out["spearman_mlps"] = float(spearmanr(am[okm].numpy(), em[okm].numpy()).statistic)
    return out
