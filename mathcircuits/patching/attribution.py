"""Attribution patching: a first-order screen for the same path-patching effects.

Attribution patching (Nanda 2023; Syed et al. 2023) replaces each patch by ``effect ≈ (a' − a) ·
∂metric/∂a``, with the gradient taken along the *same path* exact path patching measures: the
last-position residual through the MLPs and norms, every head frozen (the family's block structure, see
:mod:`mathcircuits.patching.exact`). Zero probes on each layer's attention output (before its output
norm) and after each MLP block give, in one backward pass, every sender's gradient: a head's estimate is
``(z' − z) W_O`` · its layer's attention probe gradient, an MLP's ``mlp' − mlp`` · the gradient after it.

Exact to first order, otherwise a ranking screen: :func:`compare_rankings` reports Spearman correlation
and top-k overlap against the exact method.
"""

from __future__ import annotations

import torch
from scipy.stats import spearmanr

from mathcircuits._errors import FixableValueError
from mathcircuits.data.pairs import PairBatch
from mathcircuits.models import (
    HookedModel,
    Readout,
    attn_change,
    attn_pre_norm_name,
    head_out_weight,
    hooks,
    mlp_change,
    readout,
)
from mathcircuits.models.families import block_structure
from mathcircuits.patching.cache import last_position_caches
from mathcircuits.patching.metrics import Metric
from mathcircuits.patching.result import PatchingResult
from mathcircuits.patching.scan import BatchEffects, Senders

__all__ = [
    "compare_rankings",
]


def attribution_scan(
    model: HookedModel,
    batch: PairBatch,
    senders: Senders,
    metric: Metric,
    *,
    chunk_rows: int = 8192,
    progress: bool = False,
) -> BatchEffects:
    """First-order estimates of every sender's effect for one batch of equal-length pairs.

    The gradient is of the metric's target (logit or probability); senders not scanned get NaN.
    """
    structure = block_structure(model)  # an unsupported family is the first thing to say
    if metric.every_answer_token or metric.fn is not None:
        raise FixableValueError(
            f"metric {metric.name!r} is not a first-token metric, which the attribution screen differentiates "
            "(it estimates the change at the last prompt position). ",
            "screen with metric='logit_diff' (or relative_logit, prob_change), or use method='exact'.",
        )
    spec = model.spec
    L, H = spec.n_layers, spec.n_heads
    cache = last_position_caches(model, batch.tokens, batch.cf_tokens, structure=structure)
    ref, cf = cache.ref, cache.cf
    answer = batch.answer
    final_ref = ref[hooks.resid_post(L - 1)]
    # the clean answer from the same readout as the patched one (see the exact scan)
    clean = readout(model, structure, final_ref, answer, metric.needs_probs)
    with torch.enable_grad():
        # one probe per layer, on that block's device (a split model's chain moves from device to device)
        devs = [model.layer_device(layer) for layer in range(L)]
        probes_attn = [torch.zeros_like(final_ref, device=devs[l], requires_grad=True) for l in range(L)]
        probes_mlp = [torch.zeros_like(final_ref, device=devs[l], requires_grad=True) for l in range(L)]
        delta = torch.zeros_like(final_ref, device=devs[0])
        for layer in range(L):
            delta = delta.to(devs[layer])
            pre_name = attn_pre_norm_name(structure, layer)
            pre = None if pre_name is None else ref[pre_name]
            base = ref[hooks.sub(layer, structure.mlp_reads)]
            mlp_ref = ref[hooks.mlp_out(layer)]
            if structure.parallel:  # the MLP reads resid_pre, before this layer's heads
                delta = delta + mlp_change(model, structure, layer, base, delta, mlp_ref, chunk_rows)
                delta = delta + attn_change(model, structure, layer, pre, probes_attn[layer])
            else:
                delta = delta + attn_change(model, structure, layer, pre, probes_attn[layer])
                delta = delta + mlp_change(model, structure, layer, base, delta, mlp_ref, chunk_rows)
            delta = delta + probes_mlp[layer]
        patched = readout(model, structure, final_ref + delta.to(final_ref.device), answer, metric.needs_probs)
        grads = torch.autograd.grad(patched.value(metric.target).sum(), probes_attn + probes_mlp)
    g_attn, g_mlp = grads[:L], grads[L:]
    B = answer.shape[0]
    head_eff = torch.full((B, L, H), float("nan"), device="cpu")
    mlp_eff = torch.full((B, L), float("nan"), device="cpu")
    clean = Readout(clean.logit.detach(), None if clean.prob is None else clean.prob.detach())
    dev = clean.logit.device  # where the answer is read out: every effect is computed there
    per_head = Readout(  # the clean readout of each (pair, head) row
        clean.logit.repeat_interleave(H), None if clean.prob is None else clean.prob.repeat_interleave(H)
    )
    with torch.no_grad():
        for layer in range(L):  # first-order changes in float32; each layer's effects go to the result on the CPU
            if senders.heads:
                dz = cf[hooks.z(layer)] - ref[hooks.z(layer)]
                w_o = head_out_weight(model, layer)
                change = torch.einsum("bhd,hdm,bm->bh", dz.float(), w_o.float(), g_attn[layer].float()).to(dev)
                head_eff[:, layer] = metric.of_change(change.reshape(-1), per_head).reshape(B, H).float().cpu()
            if senders.mlps:
                dm = (cf[hooks.mlp_out(layer)] - ref[hooks.mlp_out(layer)]).float()
                change = (dm * g_mlp[layer].float()).sum(-1).to(dev)
                mlp_eff[:, layer] = metric.of_change(change, clean).float().cpu()
        # the counterfactual prompt's own answer, from the same readout as the clean one: the total effect
        cf_read = readout(model, structure, cf[hooks.resid_post(L - 1)], answer, metric.needs_probs)
        total = metric(cf_read, clean).float()
    return BatchEffects(
        heads=head_eff,
        mlps=mlp_eff,
        clean_logit=clean.logit.cpu(),
        total=total.cpu(),
        excluded=metric.excluded(clean).cpu(),
    )


def compare_rankings(approx: PatchingResult, exact: PatchingResult, k: int = 10) -> dict[str, float]:
    """Spearman correlation of head effects and top-k overlap between two PatchingResults.

    Returns ``spearman_heads``, ``top{k}_overlap`` (share of the k most negative heads found by both)
    and, with at least three MLPs, ``spearman_mlps``.
    """
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
