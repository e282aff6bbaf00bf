"""MIB's circuit metrics at node level: heads and MLPs ranked, the rest patched, for every family.

MIB's ``evaluate_area_under_curve`` with ``level="node"`` (``hannamw/MIB-circuit-track``; EAP-IG's
``Graph.apply_topn(n, absolute, level="node")``): ``C_k`` keeps the ``int(p_k · |V|)`` highest-ranked nodes
with all their outgoing edges, and every edge out of a dropped node is patched. That is patching the node's
output, so the run is one forward with dropped nodes' ``hook_z``/``hook_mlp_out`` taken from the
counterfactual run (:func:`~.intervene.circuit_logprob` at node level). It is defined on families with a
norm after attention (Gemma 2/3, OLMo 2), where the edge level (:func:`~.mib.mib_scores`) is refused.

What is ours: the token embeddings are not a scored node and stay clean (MIB scores the input too; a
dropped input would patch every embedding and pruning would drop everything downstream). With the input
kept, every kept node has kept incoming and outgoing edges, so MIB's pruning changes nothing. ``f``, the
grid, CPR, CMD, the metric and the intervals are :mod:`.mib`'s.

Node scores (:func:`node_scores`), higher: more of the behaviour (minus the mean effect towards the
counterfactual):

* ``exact``: activation patching, one node at a time: ``m(N \\ {v}) − m(N)``;
* ``eap``: ``Σ_pos (a_v' − a_v) · ∂m/∂a_v`` on the clean run, ``a_v`` the node's output; the gradient
  passes whatever norm follows (Syed et al. 2023);
* ``eap-ig``: the gradient averaged over ``steps`` runs whose embeddings go from the counterfactual's
  towards the clean one's (EAP-IG-inputs, Hanna et al. 2024, at node level);
* ``random``: standard normal scores from a seed.

``aggregate="magnitude"`` ranks exact, EAP and EAP-IG nodes by the mean over pairs of each pair's ``|effect|``
instead of the mean's size (method ``"<method>-magnitude"``; :mod:`.eap`'s module docstring says why).

Usage::

    scores = node_scores(model, score_pairs, "eap-ig")
    res = mib_node_scores(model, eval_pairs, scores)
    res.cpr, res.cmd
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeAlias, get_args

import torch
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.circuit.batches import CircuitBatch, circuit_batches
from mathcircuits.circuit.components import Sender
from mathcircuits.circuit.eap import DEFAULT_IG_STEPS, Aggregate, IGSteps, ig_alphas
from mathcircuits.circuit.intervene import Wiring, circuit_logprob
from mathcircuits.circuit.mib import clean_readout, curve_summary, warn_on_choosing_pairs
from mathcircuits.circuit.mib_metric import MIBMetric, mib_readout
from mathcircuits.circuit.mib_result import MIB_PERCENTAGES, MIBScores
from mathcircuits.circuit.wiring import resample_values
from mathcircuits.data.pairset import PairSet, pair_keys
from mathcircuits.models import HookedModel, PrefixCaches, hooks
from mathcircuits.models.spec import ModelSpec, check_model
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY

__all__ = [
    "NodeMethod",
    "NodeScores",
    "mib_node_scores",
    "node_scores",
]

#: How :func:`node_scores` scores each head and MLP.
NodeMethod: TypeAlias = Literal[
    "exact", "eap", "eap-ig", "random", "imported", "exact-magnitude", "eap-magnitude", "eap-ig-magnitude"
]
NODE_METHODS: tuple[str, ...] = get_args(NodeMethod)


def graph_nodes_of(spec: ModelSpec) -> tuple[Sender, ...]:
    """The scored nodes of a model: every head, then the MLP, layer by layer."""
    return tuple(
        s
        for layer in range(spec.n_layers)
        for s in [*(Sender("head", layer, h) for h in range(spec.n_heads)), Sender("mlp", layer)]
    )


@dataclass(frozen=True, repr=False)
class NodeScores:
    """A signed score for every head and MLP (higher: more of the behaviour); ``method="imported"``: another tool's.

    ``pair_keys``: fingerprints of the pairs that made the scores (:func:`~mathcircuits.data.pairset.pair_keys`;
    empty for random or imported scores), so an evaluation on them warns of selection bias.
    """

    model: ModelSpec
    nodes: tuple[Sender, ...]
    scores: tuple[float, ...]
    method: NodeMethod
    seconds: float
    metric: str = "logit_diff"
    pair_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.method not in NODE_METHODS:
            raise FixableValueError(
                f"node-score method {self.method!r} is unknown. ", f"use one of {list(NODE_METHODS)}."
            )
        if self.nodes != graph_nodes_of(self.model):
            raise FixableValueError(
                f"these node scores do not list the nodes of {self.model.describe()} in order. ",
                "score graph_nodes_of(spec), in that order.",
            )
        if len(self.scores) != len(self.nodes) or any(math.isnan(x) for x in self.scores):
            raise FixableValueError(
                f"{len(self.scores)} scores for {len(self.nodes)} nodes, or a NaN among them. ",
                "give one finite score per node, in node order.",
            )

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return f"NodeScores({self.method}, {self.model.name}, {len(self.nodes)} nodes, metric={self.metric})"

    def ranking(self, absolute: bool) -> list[int]:
        """Node indices, highest score first (``absolute``: by ``|score|``); ties keep node order."""
        key = [abs(x) if absolute else x for x in self.scores]
        return sorted(range(len(key)), key=lambda i: -key[i])

    def top(self, n: int, absolute: bool = False) -> list[tuple[Sender, float]]:
        """The ``n`` highest-ranked nodes with their scores."""
        return [(self.nodes[i], self.scores[i]) for i in self.ranking(absolute)[:n]]


def _wiring(nodes: Sequence[Sender], labels: Sequence[str], complement: bool = False) -> Wiring:
    return Wiring(frozenset((s.kind, s.layer, s.head, lab) for s in nodes for lab in labels), None, complement)


def _names(spec: ModelSpec) -> list[str]:
    return [n for layer in range(spec.n_layers) for n in (hooks.z(layer), hooks.mlp_out(layer))]


def _record(model: HookedModel, tokens: Tensor) -> dict[str, Tensor]:
    kept: dict[str, Tensor] = {}

    def keep(t: Tensor, hook: Any, name: str) -> Tensor:  # by the name asked for (the bridge may alias it)
        kept[name] = t.detach()
        return t

    names = [hooks.resid_pre(0), *_names(model.spec)]
    with torch.no_grad():
        model.bridge.run_with_hooks(tokens, fwd_hooks=[(n, partial(keep, name=n)) for n in names])
    return kept


def _attribution(model: HookedModel, b: CircuitBatch, readout: Any, alphas: list[float | None]) -> Tensor:
    """Each pair's first-order effect of each node towards the counterfactual, ``[pair, node]`` (float64)."""
    spec, names = model.spec, _names(model.spec)
    clean, cf = _record(model, b.tokens), _record(model, b.cf_tokens)
    embed = hooks.resid_pre(0)
    grads = {n: torch.zeros_like(clean[n], dtype=torch.float32) for n in names}
    for alpha in alphas:
        seen: dict[str, Tensor] = {}

        def start_from(t: Tensor, hook: Any, alpha: float | None = alpha) -> Tensor:
            x = clean[embed] if alpha is None else cf[embed] + alpha * (clean[embed] - cf[embed])
            return x.clone().requires_grad_(True)

        def watch(t: Tensor, hook: Any, name: str, seen: dict[str, Tensor] = seen) -> Tensor:
            seen[name] = t
            return t

        with torch.enable_grad():
            logits = model.bridge.run_with_hooks(
                b.tokens, fwd_hooks=[(embed, start_from), *((n, partial(watch, name=n)) for n in names)]
            )
            m = readout(logits[:, -b.answers.shape[1] :], b.answers).sum()
            got = torch.autograd.grad(m, [seen[n] for n in names], allow_unused=False)
        for n, g in zip(names, got):
            grads[n] += g.float() / len(alphas)
    out = torch.empty(len(b.idx), len(graph_nodes_of(spec)), dtype=torch.float64, device="cpu")  # host
    at = 0
    for layer in range(spec.n_layers):
        z = hooks.z(layer)
        dz = (cf[z] - clean[z]).float() * grads[z]  # [B, S, head, d_head]
        out[:, at : at + spec.n_heads] = dz.sum((1, 3)).double().cpu()
        m = hooks.mlp_out(layer)
        out[:, at + spec.n_heads] = ((cf[m] - clean[m]).float() * grads[m]).sum((1, 2)).double().cpu()
        at += spec.n_heads + 1
    return out


def node_scores(
    model: HookedModel,
    pairs: PairSet,
    method: NodeMethod = "eap-ig",
    *,
    steps: IGSteps = DEFAULT_IG_STEPS,
    metric: MIBMetric = "logit_diff",
    batch_size: int = 8,
    seed: int = 0,
    aggregate: Aggregate = "mean",
) -> NodeScores:
    """Score every head and MLP (see the module docstring), as :func:`mib_node_scores` ranks them.

    Any family (node level needs no additive head writes). ``pairs`` need ``cf_answer_tokens`` for
    ``logit_diff`` and must be disjoint from the evaluation's. Scores are minus the mean effect over pairs
    (``aggregate="mean"``) or the mean of each pair's ``|effect|`` (``"magnitude"``; not for ``random``).
    """
    t0 = time.perf_counter()
    if method not in ("exact", "eap", "eap-ig", "random") or (method == "random" and aggregate != "mean"):
        raise FixableValueError(
            f"node-score method {method!r} with aggregate={aggregate!r} cannot be computed here. ",
            "use 'exact', 'eap', 'eap-ig' or 'random' (random scores have no effects to aggregate).",
        )
    nodes = graph_nodes_of(model.spec)
    if method == "random":
        g = torch.Generator().manual_seed(seed)
        values = torch.randn(len(nodes), generator=g, dtype=torch.float64, device="cpu")
        return NodeScores(model.spec, nodes, tuple(values.tolist()), method, time.perf_counter() - t0, metric)
    alphas = ig_alphas(method, steps) if method != "exact" else []
    pairs.require_model(model, "node_scores")
    readouts = mib_readout(pairs, metric)
    total, n, store = torch.zeros(len(nodes), dtype=torch.float64, device="cpu"), 0, {}
    for b in circuit_batches(model, pairs, "suffix", batch_size, rows=list(readouts.rows)):
        readout = readouts.of(b.idx)
        if method == "exact":
            labels = sorted(b.where)
            wirings = [_wiring([s], labels, complement=True) for s in nodes]
            patched = circuit_logprob(model, b, resample_values(model, b, store), wirings, store=store, readout=readout)
            effect = (patched.double() - clean_readout(model, b, readout, store).double()).T  # [pair, node]
        else:
            effect = _attribution(model, b, readout, alphas)
        total += (effect.abs() if aggregate == "magnitude" else effect).sum(0)
        n += len(b.idx)
    values = total / n if aggregate == "magnitude" else -total / n
    made_on, name = tuple(pair_keys(pairs)), (f"{method}-magnitude" if aggregate == "magnitude" else method)
    return NodeScores(model.spec, nodes, tuple(values.tolist()), name, time.perf_counter() - t0, metric, made_on)


def mib_node_scores(
    model: HookedModel,
    pairs: PairSet,
    scores: NodeScores,
    *,
    metric: MIBMetric = "logit_diff",
    percentages: Sequence[float] = MIB_PERCENTAGES,
    uncertainty: Uncertainty | None = DEFAULT_UNCERTAINTY,
    batch_size: int = 8,
) -> MIBScores:
    """MIB's faithfulness curves, CPR and CMD of a node ranking on ``pairs`` (``level="node"``).

    ``pairs``: disjoint from those that made the scores. Options as :func:`~.mib.mib_scores`; percentages are
    of the nodes, and ``n_edges`` in the result counts nodes.
    """
    t0 = time.perf_counter()
    check_model(scores.model, model, "these node scores", "score this model's nodes")
    grid = [float(p) for p in percentages]
    if not grid or any(not 0 < p <= 1 for p in grid) or grid != sorted(set(grid)):
        raise FixableValueError(
            f"percentages {list(percentages)} must increase within (0, 1]. ", "use MIB_PERCENTAGES."
        )
    pairs.require_model(model, "mib_node_scores")
    warn_on_choosing_pairs("mib_node_scores", pairs, scores.pair_keys, "node")
    readouts = mib_readout(pairs, metric)
    nodes, n_nodes = scores.nodes, len(scores.nodes)
    rankings = {"signed": scores.ranking(absolute=False), "absolute": scores.ranking(absolute=True)}
    kept = {name: [order[: int(p * n_nodes)] for p in grid] for name, order in rankings.items()}
    parts: dict[str, list[Tensor]] = {"signed": [], "absolute": []}
    parts_empty, parts_clean, templates, operations, rows = [], [], [], [], []
    store: PrefixCaches = {}
    for b in circuit_batches(model, pairs, "suffix", batch_size, rows=list(readouts.rows)):
        rows += b.idx
        readout, labels = readouts.of(b.idx), sorted(b.where)
        values = resample_values(model, b, store)
        clean = clean_readout(model, b, readout, store)
        circuits = [[]] + [k for name in rankings for k in kept[name] if len(k) < n_nodes]
        run = circuit_logprob(
            model, b, values, [_wiring([nodes[i] for i in k], labels) for k in circuits], store=store, readout=readout
        )
        parts_empty.append(run[0])
        at = 1
        for name in rankings:
            cols = []
            for k in kept[name]:
                if len(k) == n_nodes:
                    cols.append(clean)
                else:
                    cols.append(run[at])
                    at += 1
            parts[name].append(torch.stack(cols))
        parts_clean.append(clean)
        templates += b.templates
        operations += b.operations
    per_ranking = {name: torch.cat(p, 1).double() for name, p in parts.items()}
    empty, clean_all = torch.cat(parts_empty).double(), torch.cat(parts_clean).double()
    summary = curve_summary(per_ranking, empty, clean_all, templates, operations, grid, uncertainty, rows)
    return MIBScores.from_curves(
        summary,
        model=model.spec,
        method=scores.method,
        metric=metric,
        percentages=tuple(grid),
        n_edges=n_nodes,
        kept_signed=tuple(len(k) for k in kept["signed"]),
        kept_absolute=tuple(len(k) for k in kept["absolute"]),
        clean=float(clean_all.mean()),
        counterfactual=float(empty.mean()),
        n_pairs=len(clean_all),
        dropped=readouts.dropped,
        score_seconds=scores.seconds,
        seconds=time.perf_counter() - t0,
        level="node",
    )
