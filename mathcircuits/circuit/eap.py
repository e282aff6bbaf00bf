"""Edge attribution patching (EAP) and EAP with integrated gradients (EAP-IG) on every edge of the graph at once.

The graph is MIB's (Mueller et al. 2025; :func:`~.edge_scores.graph_edges`), KV heads kept grouped. A
sender ``u`` writes ``a_u`` into the residual; a receiver ``v`` reads the residual ``x_v`` (``resid_pre``
for q/k/v, the MLP's input residual, the final residual for the logits). Patching the edge alone changes
``x_v`` by ``Δ_u = a_u' − a_u`` (counterfactual − clean). To first order (Syed et al. 2023)::

    EAP(u → v)    = Σ_pos Δ_u · ∂m/∂x_v                          gradient on the clean run
    EAP-IG(u → v) = Σ_pos Δ_u · (1/n) Σ_k ∂m/∂x_v |_{α_k}         α_k = k/n, k = 0 … n−1

(Hanna et al. 2024). For EAP-IG the input embeddings run from the counterfactual's (α = 0) towards the
clean one's, ``Δ_u`` unchanged; ``n`` is ``steps`` (5 in MIB's ``run_attribution.py``). This is the
reference code's ``EAP-IG-inputs`` (``hannamw/EAP-IG`` ``src/eap/attribute.py``: ``get_scores_eap_ig``,
``input_interpolation_hook``; the score summed over positions in ``utils.py``'s ``gradient_hook``).

``∂m/∂x_v`` is taken w.r.t. the receiver's *own copy* of the residual (its norm and projection only):
one backward gives every ``hook_q/k/v`` and MLP input gradient, each pulled back through its own norm
and projection. A KV group's key gradient is the sum over the query heads sharing it (the reference
code, which ungroups KV heads, splits it over them).

Signs: :func:`edge_attribution` gives effects towards the counterfactual (counterfactual − clean);
:func:`eap_scores` gives :class:`EdgeScores`, "higher: more of the behaviour", minus the mean effect
(MIB's ``loss=True``).

**Over pairs**, MIB (and the reference code) averages the signed effect and ranks by the mean's size, ``|mean_i
e_i|``: an edge that moves every pair's answer, up in some and down in others, scores near 0 beside an edge that
moves none. ``aggregate="magnitude"`` ranks by ``mean_i |e_i|`` instead: how much the edge does in each pair,
whichever way. A circuit judged on other pairs keeps what those pairs use (on SmolLM2 addition and subtraction its
MIB curves are nearer 1 than the mean's on held-out pairs: ``benchmarks/README.md``). The two cost the same.

Exact edges (:mod:`.edges`) differ: a sender's change reaches the receiver directly and through the MLPs
in between (heads frozen). They agree to first order where no MLP lies between (an MLP into the next
layer, a head into its own layer's MLP).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Literal, get_args

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._checks import Bounds
from mathcircuits._errors import FixableValueError
from mathcircuits._progress import progress_bar
from mathcircuits.circuit.batches import circuit_batches
from mathcircuits.circuit.chain import first_diff, receiver_input
from mathcircuits.circuit.components import Receiver, Sender, upstream_senders
from mathcircuits.circuit.edge_scores import INPUT, EdgeScores, graph_edges
from mathcircuits.circuit.intervene import RunScore, answer_logprob
from mathcircuits.circuit.mib_metric import MIBMetric, mib_readout
from mathcircuits.circuit.pair_cache import PairCache, pair_cache
from mathcircuits.data.pairset import PairSet, pair_keys
from mathcircuits.models import HookedModel, attn_change, attn_pre_norm_name, head_out_weights, hooks
from mathcircuits.models.families import block_structure

__all__ = [
    "AttributionMethod",
    "eap_scores",
]

AttributionMethod = Literal["eap", "eap-ig"]
ATTRIBUTION_METHODS: tuple[str, ...] = get_args(AttributionMethod)
#: How an edge's effects on the scoring pairs become its score: minus their mean (MIB's) or the mean of their sizes.
Aggregate = Literal["mean", "magnitude"]
#: MIB's default (``run_attribution.py``: ``--ig-steps`` 5)
DEFAULT_IG_STEPS = 5
#: integrated-gradient steps: each is one more forward and backward pass per batch (MIB uses 5; the estimate
#: settles well below 100, :func:`~.eap_compare.ig_convergence`)
IGSteps = Annotated[int, Bounds(ge=1, le=1000, why="each step is one more forward and backward pass per batch")]
EMBED = hooks.resid_pre(0)  # the input sender's output: the residual before the first block


def graph_nodes(model: HookedModel, parallel: bool) -> tuple[list[Sender], list[Receiver]]:
    """The senders (the input, then heads and MLPs by layer) and receivers of :func:`~.edge_scores.graph_edges`."""
    senders = [INPUT, *upstream_senders(model.spec, Receiver("logits"), parallel)]
    receivers = list(dict.fromkeys(r for _, r in graph_edges(model.spec, parallel)))
    return senders, receivers


def ig_alphas(method: AttributionMethod, steps: int) -> list[float | None]:
    """Where the gradient is taken: the clean run (EAP: ``[None]``) or ``k/steps``, k = 0 … steps−1 (EAP-IG)."""
    if method not in ATTRIBUTION_METHODS:
        raise FixableValueError(
            f"attribution method {method!r} is unknown. ", f"use one of {list(ATTRIBUTION_METHODS)}."
        )
    if method == "eap":
        return [None]
    if steps < 1:
        raise FixableValueError(f"EAP-IG with steps={steps}: need at least one step. ", "steps ≥ 1 (MIB uses 5).")
    return [k / steps for k in range(steps)]


@torch.no_grad()
def sender_deltas(
    model: HookedModel, cache: PairCache, senders: Sequence[Sender], start: int, cf_embed: Tensor
) -> Float[Tensor, "sender batch pos d_model"]:
    """``a_u' − a_u``: what each sender adds to the residual, counterfactual − clean, at positions ``start…`` (float32).

    A head's share passes the post-attention norm where the family has one (``P(a + c) − P(a)``, the other
    heads clean), as in exact edges.
    """
    structure, ref, cf = cache.structure, cache.ref, cache.cf
    W_O = head_out_weights(model)
    B, S, d = cache.tokens.shape[0], cache.tokens.shape[1] - start, model.spec.d_model
    out = torch.zeros(len(senders), B, S, d, device=model.device)
    by_layer: dict[int, list[int]] = {}
    for j, s in enumerate(senders):
        if s.kind == "input":
            out[j] = (cf_embed - ref[EMBED][:, start:]).float()
        else:
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
    """Gradient w.r.t. each receiver's own copy of the residual ``x`` [B, P, d] from its hook's ``g``: [n, B, P, d]."""
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


def _suffix_run(model: HookedModel, cache: PairCache, tokens: Tensor, start: int, fwd: list, n_ans: int) -> Tensor:
    """Logits at the answer positions of ``tokens[:, start:]`` after the clean run's cached prefix."""
    kv = copy.deepcopy(cache.kv(model, start)) if start > 0 else None
    kw = {"past_key_values": kv} if kv is not None else {}
    return model.bridge.run_with_hooks(tokens[:, start:], fwd_hooks=fwd, logits_to_keep=n_ans, **kw)[:, -n_ans:]


def _gradients(
    model: HookedModel, cache: PairCache, readout: RunScore, alpha: float | None, cf_embed: Tensor, start: int
) -> dict[tuple[str, int], Tensor]:
    """``{(kind, layer): [n, B, P, d]}`` input gradients at embeddings ``cf + α (clean − cf)`` (None: clean)."""
    structure, L = cache.structure, model.spec.n_layers
    leaves: dict[str, Tensor] = {}
    seen: dict[str, Tensor] = {}
    grad_names = [hooks.sub(layer, f"attn.hook_{k}") for layer in range(L) for k in "qkv"]
    grad_names += [hooks.mlp_in(layer) for layer in range(L)] + [hooks.resid_post(L - 1)]
    read_names = sorted({n for lay in range(L) for n in (hooks.resid_pre(lay), hooks.sub(lay, structure.mlp_reads))})

    def leaf(act: Tensor, hook: Any, name: str = "") -> Tensor:
        leaves[name] = torch.zeros_like(act, requires_grad=True)
        return act + leaves[name]

    def read(act: Tensor, hook: Any, name: str = "") -> None:
        seen[name] = act.detach()

    def embed(act: Tensor, hook: Any) -> Tensor:
        return cf_embed.to(act.dtype) + alpha * (act - cf_embed.to(act.dtype))

    fwd = [] if alpha is None else [(EMBED, embed)]  # before the read of the same hook
    fwd += [(n, lambda a, hook, n=n: read(a, hook, n)) for n in read_names]
    fwd += [(n, lambda a, hook, n=n: leaf(a, hook, n)) for n in grad_names]
    with torch.enable_grad():
        logits = _suffix_run(model, cache, cache.tokens, start, fwd, cache.all_answers.shape[1])
        target = readout(logits, cache.all_answers)
        grads = dict(zip(grad_names, torch.autograd.grad(target.sum(), [leaves[n] for n in grad_names])))
    out: dict[tuple[str, int], Tensor] = {}
    for layer in range(L):
        pre = seen[hooks.resid_pre(layer)]
        for k in "qkv":
            out[(k, layer)] = _pullback(model, cache, k, layer, pre, grads[hooks.sub(layer, f"attn.hook_{k}")])
        mid = seen[hooks.sub(layer, structure.mlp_reads)]
        out[("mlp", layer)] = _pullback(model, cache, "mlp", layer, mid, grads[hooks.mlp_in(layer)])
    out[("logits", -1)] = grads[hooks.resid_post(L - 1)][None].float()
    return out


def alpha_effects(
    model: HookedModel,
    cache: PairCache,
    readout: RunScore,
    alphas: Sequence[float | None],
    positions: Sequence[int] | None = None,
) -> Iterator[Float[Tensor, "pair sender receiver"]]:
    """``Σ_pos Δ_u · ∂m/∂x_v`` with the gradient taken at each of ``alphas`` (None: the clean run), one at a time."""
    parallel = cache.structure.parallel
    senders, receivers = graph_nodes(model, parallel)
    B, S = cache.tokens.shape
    start = first_diff(cache)
    if start >= S:
        for _ in alphas:
            yield torch.zeros(B, len(senders), len(receivers), device="cpu")
        return
    keep = torch.ones(S - start, device=model.device)
    if positions is not None:
        keep.zero_()
        keep[[p - start for p in sorted({p % S for p in positions}) if p >= start]] = 1.0
    seen: dict[str, Tensor] = {}
    with torch.no_grad():  # the counterfactual's embeddings at start… (its prefix is the clean one)
        _suffix_run(model, cache, cache.cf_tokens, start, [(EMBED, lambda a, hook: seen.update(e=a))], 1)
    cf_embed = seen["e"]
    delta = sender_deltas(model, cache, senders, start, cf_embed) * keep[None, None, :, None]
    n_up = {}  # senders are in layer order, so those upstream of a receiver are a prefix
    for r in receivers:
        n_up[(r.kind, r.layer)] = 1 + sum(r.is_downstream_of(s, parallel) for s in senders[1:])
    for alpha in alphas:
        out = torch.zeros(B, len(senders), len(receivers), device=model.device)
        col = 0
        for key, g in _gradients(model, cache, readout, alpha, cf_embed, start).items():  # in receiver order
            out[:, : n_up[key], col : col + len(g)] = torch.einsum("ubpd,rbpd->bur", delta[: n_up[key]], g)
            col += len(g)
        yield out.cpu()


def edge_attribution(
    model: HookedModel,
    cache: PairCache,
    readout: RunScore = answer_logprob,
    method: AttributionMethod = "eap-ig",
    steps: IGSteps = DEFAULT_IG_STEPS,
    positions: Sequence[int] | None = None,
) -> Float[Tensor, "pair sender receiver"]:
    """EAP or EAP-IG effects of every edge, per pair of one batch (see the module docstring).

    ``readout``: the differentiated score ``(logits [rows, n_answer, vocab], answers) → [rows]`` (default:
    the whole answer's log-probability; :func:`eap_scores` passes MIB's logit difference). ``positions``:
    sum over these only (None: all). Returns ``[pair, sender, receiver]`` (counterfactual − clean) in
    :func:`graph_nodes` order; an edge whose sender cannot reach its receiver is 0.
    """
    alphas = ig_alphas(method, steps)
    return sum(alpha_effects(model, cache, readout, alphas, positions)) / len(alphas)


def eap_scores(
    model: HookedModel,
    pairs: PairSet,
    method: AttributionMethod = "eap-ig",
    steps: IGSteps = DEFAULT_IG_STEPS,
    metric: MIBMetric = "logit_diff",
    batch_size: int = 8,
    progress: bool | None = None,
    aggregate: Aggregate = "mean",
) -> EdgeScores:
    """EAP or EAP-IG scores of every edge of the graph, as :func:`~.mib.mib_scores` ranks them.

    ``pairs`` need ``cf_answer_tokens`` for ``logit_diff``. ``steps``: MIB's default 5
    (:func:`~.eap_compare.ig_convergence` shows what more would change). ``aggregate``: ``"mean"``, scores are
    minus the mean effect (MIB's); ``"magnitude"``, the mean over pairs of each pair's ``|effect|`` (never
    negative; method ``"eap-magnitude"`` / ``"eap-ig-magnitude"``; see the module docstring).
    ``progress``: a bar on stderr (None: on unless ``MATHCIRCUITS_PROGRESS=0``).
    """
    t0 = time.perf_counter()
    ig_alphas(method, steps)
    pairs.require_model(model, "eap_scores")
    readouts = mib_readout(pairs, metric)
    parallel = block_structure(model).parallel
    total, n = None, 0
    batches = circuit_batches(model, pairs, "suffix", batch_size, rows=list(readouts.rows))
    desc = f"{method} scores of every edge ({len(pairs)} pairs)"
    for b in progress_bar(progress, desc, iterable=batches):
        P = b.n_prompt
        cache = pair_cache(model, b.tokens[:, :P], b.cf_tokens[:, :P], b.answers[:, 0], answers=b.answers)
        eff = edge_attribution(model, cache, readouts.of(b.idx), method, steps)
        eff = (eff.abs() if aggregate == "magnitude" else eff).sum(0)
        total = eff if total is None else total + eff
        n += len(b.idx)
    senders, receivers = graph_nodes(model, parallel)
    si = {s: j for j, s in enumerate(senders)}
    ri = {r: j for j, r in enumerate(receivers)}
    edges = graph_edges(model.spec, parallel)
    mean = total.double() / n if aggregate == "magnitude" else -total.double() / n  # higher: more of the behaviour
    values = tuple(float(mean[si[s], ri[r]]) for s, r in edges)
    seconds = time.perf_counter() - t0
    name = f"{method}-magnitude" if aggregate == "magnitude" else method
    return EdgeScores(model.spec, parallel, edges, values, name, seconds, metric, tuple(pair_keys(pairs)))
