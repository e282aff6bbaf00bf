"""Edge attribution patching (EAP) and EAP with integrated gradients (EAP-IG) on every edge of the graph at once.

The graph is MIB's (Mueller et al. 2025), with grouped KV heads kept grouped: senders are every head and MLP,
receivers the logits, each head's query, each KV group's key and value, and each MLP's input. A sender ``u``
writes ``a_u`` into the residual; a receiver ``v`` reads the residual ``x_v`` (``resid_pre`` for q/k/v, the
MLP's input residual, the final residual for the logits). Patching the edge alone changes ``x_v`` by
``Δ_u = a_u' − a_u`` (counterfactual − clean) and leaves every other reader as it was. To first order
(Syed et al. 2023)::

    EAP(u → v)    = Σ_pos Δ_u · ∂m/∂x_v                          gradient on the clean run
    EAP-IG(u → v) = Σ_pos Δ_u · (1/n) Σ_k ∂m/∂x_v |_{α_k}         α_k = k/n, k = 0 … n−1

(Hanna et al. 2024). For EAP-IG the input embeddings run from the counterfactual's (α = 0) towards the
clean one's, and ``Δ_u`` stays the clean-vs-counterfactual difference; ``n`` is ``steps`` (5 in MIB's
``run_attribution.py``). This is the reference code's ``EAP-IG-inputs``
(``hannamw/EAP-IG`` ``src/eap/attribute.py``: ``get_scores_eap_ig``, ``input_interpolation_hook``;
the score ``(corrupted − clean) · gradient`` summed over positions in ``utils.py``'s ``gradient_hook``).

``∂m/∂x_v`` is the gradient with respect to the receiver's *own copy* of the residual (its norm and its
projection only: TransformerLens' split q/k/v inputs). One backward gives the gradient at every
``hook_q/k/v`` and MLP input; each is pulled back through that receiver's norm and projection alone. A
KV group's key is one computation, so its gradient is the sum over the query heads that share it: the
reference code, which ungroups KV heads, would split it over them.

Signs: like every effect here, a score is the change *towards the counterfactual* (counterfactual −
clean), in the metric's units; an edge the behaviour needs scores negative under ``answer_logprob``.

Exact edges (:mod:`.edges`) are a different quantity: a sender's change reaches the receiver directly and
through the MLPs in between (heads frozen). The two agree to first order where no MLP lies between: an
MLP into the next layer, a head into its own layer's MLP (and anything into the logits when no MLP
responds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, get_args

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits.circuit.chain import first_diff, receiver_input
from mathcircuits.circuit.components import Receiver, Sender, upstream_senders
from mathcircuits.circuit.pair_cache import PairCache
from mathcircuits.models import HookedModel, hooks
from mathcircuits.models.capture import capture
from mathcircuits.models.changes import attn_change, attn_pre_norm_name
from mathcircuits.models.placement import head_out_weights
from mathcircuits.patching.metrics import Metric, answer_readout

__all__ = [
    "ATTRIBUTION_METHODS",
    "DEFAULT_IG_STEPS",
    "AttributionMethod",
    "edge_attribution",
    "graph_receivers",
    "graph_senders",
    "ig_alphas",
]

AttributionMethod = Literal["eap", "eap-ig"]
ATTRIBUTION_METHODS: tuple[str, ...] = get_args(AttributionMethod)
#: MIB's default (``run_attribution.py``: ``--ig-steps`` 5)
DEFAULT_IG_STEPS = 5
EMBED = "hook_embed"


def graph_senders(model: HookedModel, parallel: bool) -> list[Sender]:
    """Every head and MLP, by layer (a layer's heads before its MLP)."""
    return upstream_senders(model.spec, Receiver("logits"), parallel)


def graph_receivers(model: HookedModel) -> list[Receiver]:
    """Per layer each query head, each KV group's key and value, the MLP's input; then the logits."""
    spec = model.spec
    out: list[Receiver] = []
    for layer in range(spec.n_layers):
        out += [Receiver("q", layer, head=h) for h in range(spec.n_heads)]
        out += [Receiver(k, layer, group=g) for k in ("k", "v") for g in range(spec.n_kv_heads)]
        out.append(Receiver("mlp", layer))
    return [*out, Receiver("logits")]


def ig_alphas(method: AttributionMethod, steps: int) -> list[float | None]:
    """Where the gradient is taken: the clean run (EAP: ``[None]``) or ``k/steps``, k = 0 … steps−1 (EAP-IG)."""
    if method not in ATTRIBUTION_METHODS:
        raise ValueError(f"attribution method {method!r} is unknown. Fix: use one of {list(ATTRIBUTION_METHODS)}.")
    if method == "eap":
        return [None]
    if steps < 1:
        raise ValueError(f"EAP-IG with steps={steps}: need at least one step. Fix: steps ≥ 1 (MIB uses 5).")
    return [k / steps for k in range(steps)]


@torch.no_grad()
def sender_deltas(model: HookedModel, cache: PairCache, senders: Sequence[Sender], start: int) -> Tensor:
    """``a_u' − a_u``: what each sender adds to the residual, counterfactual − clean, at positions ``start…``.

    A head's share passes the post-attention norm where the family has one (``P(a + c) − P(a)``, the other heads
    clean), as in exact edges. Returns ``[sender, batch, pos, d_model]`` in float32.
    """
    structure, ref, cf = cache.structure, cache.ref, cache.cf
    W_O = head_out_weights(model)
    B, S, d = cache.tokens.shape[0], cache.tokens.shape[1] - start, model.spec.d_model
    out = torch.zeros(len(senders), B, S, d, device=model.device)
    by_layer: dict[int, list[int]] = {}
    for j, s in enumerate(senders):
        by_layer.setdefault(s.layer, []).append(j)
    for layer, idx in by_layer.items():
        heads = [j for j in idx if senders[j].kind == "head"]
        if heads:
            hs = torch.tensor([senders[j].head for j in heads], device="cpu")
            dz = (cf[hooks.z(layer)][:, start:] - ref[hooks.z(layer)][:, start:])[:, :, hs]  # [B, S, h, d_head]
            change = torch.einsum("bphd,hdm->hbpm", dz, W_O[layer, hs]).reshape(-1, d)
            pre_name = attn_pre_norm_name(structure, layer)
            pre = None if pre_name is None else ref[pre_name][:, start:].reshape(-1, d).repeat(len(heads), 1)
            flat = attn_change(model, structure, layer, pre, change)
            out[heads] = flat.reshape(len(heads), B, S, d).float().to(out.device)
        for j in idx:
            if senders[j].kind == "mlp":
                out[j] = (cf[hooks.mlp_out(layer)][:, start:] - ref[hooks.mlp_out(layer)][:, start:]).float()
    return out


def _pullback(model: HookedModel, cache: PairCache, kind: str, layer: int, x: Tensor, g: Tensor) -> Tensor:
    """Gradient w.r.t. each receiver's own copy of the residual ``x`` [B, P, d], from its hook's gradient ``g``.

    Returns ``[n, B, P, d]`` (n: query heads, KV groups, or 1 for an MLP).
    """
    with torch.enable_grad():
        if kind == "mlp":
            xr = x.detach().clone().requires_grad_(True)
            out = receiver_input(model, cache.structure, Receiver("mlp", layer), xr)
            return torch.autograd.grad(out, xr, g.to(out.dtype))[0][None].float()
        n = g.shape[-2]
        xr = x.detach()[None].repeat(n, *([1] * x.dim())).requires_grad_(True)
        out = receiver_input(model, cache.structure, Receiver(kind, layer), xr)  # [n, B, P, n, d_head]
        eye = torch.eye(n, device=g.device, dtype=out.dtype)
        cot = eye[:, None, None, :, None] * g.to(out.dtype)[None]  # receiver i's cotangent: its own slice only
        return torch.autograd.grad(out, xr, cot)[0].float()


def _gradients(
    model: HookedModel, cache: PairCache, metric: Metric, alpha: float | None, cf_embed: Tensor | None, start: int
) -> dict[tuple[str, int], Tensor]:
    """One forward and backward: ``{(kind, layer): [n, B, P, d]}`` receiver-input gradients (logits: layer −1)."""
    spec, structure = model.spec, cache.structure
    L = spec.n_layers
    leaves: dict[str, Tensor] = {}
    seen: dict[str, Tensor] = {}
    grad_names = [hooks.sub(layer, f"attn.hook_{k}") for layer in range(L) for k in "qkv"]
    grad_names += [hooks.mlp_in(layer) for layer in range(L)] + [hooks.resid_post(L - 1)]
    read_names = [hooks.resid_pre(layer) for layer in range(L)] + [hooks.sub(lay, structure.mlp_reads) for lay in range(L)]

    def leaf(act: Tensor, hook: Any, name: str = "") -> Tensor:
        leaves[name] = torch.zeros_like(act, requires_grad=True)
        return act + leaves[name]

    def read(act: Tensor, hook: Any, name: str = "") -> None:
        seen[name] = act.detach()[:, start:]

    def embed(act: Tensor, hook: Any) -> Tensor:
        return cf_embed.to(act.dtype) + alpha * (act - cf_embed.to(act.dtype))

    fwd = [(n, lambda a, hook, n=n: read(a, hook, n)) for n in sorted(set(read_names))]
    fwd += [(n, lambda a, hook, n=n: leaf(a, hook, n)) for n in grad_names]
    if alpha is not None:
        fwd.append((EMBED, embed))
    n_ans = cache.all_answers.shape[1]
    with torch.enable_grad():
        logits = model.bridge.run_with_hooks(cache.tokens, fwd_hooks=fwd)[:, -n_ans:]
        target = answer_readout(logits, cache.all_answers, metric).value(metric.target)
        grads = dict(zip(grad_names, torch.autograd.grad(target.sum(), [leaves[n] for n in grad_names])))
    out: dict[tuple[str, int], Tensor] = {}
    for layer in range(L):
        pre = seen[hooks.resid_pre(layer)]
        for k in "qkv":
            g = grads[hooks.sub(layer, f"attn.hook_{k}")][:, start:]
            out[(k, layer)] = _pullback(model, cache, k, layer, pre, g)
        mid = seen[hooks.sub(layer, structure.mlp_reads)]
        out[("mlp", layer)] = _pullback(model, cache, "mlp", layer, mid, grads[hooks.mlp_in(layer)][:, start:])
    out[("logits", -1)] = grads[hooks.resid_post(L - 1)][None, :, start:].float()
    return out


def edge_attribution(
    model: HookedModel,
    cache: PairCache,
    metric: Metric,
    method: AttributionMethod = "eap-ig",
    steps: int = DEFAULT_IG_STEPS,
    positions: Sequence[int] | None = None,
) -> Float[Tensor, "pair sender receiver"]:
    """EAP or EAP-IG scores of every edge, per pair of one batch (see the module docstring).

    Args:
        model: the hooked model.
        cache: one batch and its cached runs (:func:`~.pair_cache.pair_cache`).
        metric: a built-in metric; its ``target`` is differentiated (relative metrics divide by the clean value).
        method: ``"eap"`` (gradient on the clean run) or ``"eap-ig"`` (``steps`` gradients along the input path).
        steps: EAP-IG's steps (ignored by EAP).
        positions: sum over these positions only (None: every position; before the first one where the two
            prompts differ nothing changes).

    Returns:
        ``[pair, sender, receiver]`` in the order of :func:`graph_senders` and :func:`graph_receivers`; an
        edge whose sender lies at or after its receiver is 0.
    """
    alphas = ig_alphas(method, steps)
    if metric.fn is not None:
        raise ValueError(
            f"metric {metric.name!r} is a user's callable, which attribution cannot differentiate. "
            "Fix: use a built-in metric (mathcircuits.patching.METRICS)."
        )
    parallel = cache.structure.parallel
    senders, receivers = graph_senders(model, parallel), graph_receivers(model)
    B, S = cache.tokens.shape
    start = first_diff(cache)
    scores = torch.zeros(B, len(senders), len(receivers), device=model.device)
    if start < S:
        keep = torch.ones(S - start, device=model.device)
        if positions is not None:
            keep.zero_()
            keep[[p - start for p in sorted({p % S for p in positions}) if p >= start]] = 1.0
        delta = sender_deltas(model, cache, senders, start) * keep[None, None, :, None]
        cf_embed = None
        if alphas != [None]:
            cf_embed = capture(model.bridge, cache.cf_tokens, [EMBED], position=None)[1][EMBED]
        total: dict[tuple[str, int], Tensor] = {}
        for alpha in alphas:
            for key, g in _gradients(model, cache, metric, alpha, cf_embed, start).items():
                total[key] = g if key not in total else total[key] + g
        col = 0
        for key, g in total.items():  # in the order of graph_receivers: per layer q, k, v, MLP; the logits
            r = Receiver(key[0], key[1])
            n_up = sum(r.is_downstream_of(s, parallel) for s in senders)  # senders are in layer order: a prefix
            scores[:, :n_up, col : col + len(g)] = torch.einsum("ubpd,rbpd->bur", delta[:n_up], g) / len(alphas)
            col += len(g)
    return metric.of_change(scores.permute(1, 2, 0), cache.clean).permute(2, 0, 1).float().cpu()
