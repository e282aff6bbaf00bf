"""Circuit discovery: iterate sender → receiver path patching back from the logits until the circuit saturates.

Method (Wang et al. 2023 §3; Zhang et al. 2024, App. B). Round 0 asks which heads and MLPs at the readout
positions (``last``, ``ans1``, …) change the answer through the logits directly. Each later round asks,
for every node found in the round before, which senders change its inputs:

* a head's query at ``t``: only senders at ``t`` (heads are frozen, so a patch elsewhere never reaches ``t``);
* its KV group's key and value: senders at each earlier labelled position separately, so an edge says
  which token's key/value carries the information;
* an MLP's input at ``t``: senders at ``t``.

Senders with ``|mean effect| ≥ threshold`` (the ``top_k`` strongest per receiver) become edges and new
nodes. Every edge is measured exactly (:func:`~.edges.exact_edges`); with ``screen`` the attribution
screen ranks the senders first and only the ``screen`` strongest are measured exactly.

**Deep enough.** After each round the circuit is scored on the discovery pairs (resample, edge level);
discovery stops when a round adds less than ``saturation_tol`` of the largest faithfulness so far
(:mod:`.plateau`), or at a budget (``depth``, ``max_nodes``, ``max_seconds``). ``settings.rounds`` and
``settings.stopped`` record the rounds and why it ended.

Pairs may come from several templates: a label absent from a template's batches has no effect there, and
its effect is averaged over the pairs that have it. An edge's interval is a bootstrap over those pairs.

Usage::

    circuit = discover_circuit(model, pairs, depth=6, screen=12, saturation_tol=0.05)
    circuit.settings.rounds, circuit.settings.stopped
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from mathcircuits._errors import FixableValueError
from mathcircuits._progress import progress_bar
from mathcircuits._schema import configured, expect, expect_pairs
from mathcircuits.circuit.components import Receiver, Sender, upstream_senders
from mathcircuits.circuit.config import CircuitConfig
from mathcircuits.circuit.edges import exact_edges
from mathcircuits.circuit.faithfulness import Scorer
from mathcircuits.circuit.measure import DiscoveryBatches, measure_senders
from mathcircuits.circuit.plateau import round_saturated
from mathcircuits.circuit.reference import reference_edges
from mathcircuits.circuit.result import Circuit, CircuitData, CircuitSettings, DiscoveryRound, Edge, Node
from mathcircuits.circuit.subcircuits import wiring_of
from mathcircuits.data.pairset import PairSet, check_token_aligned
from mathcircuits.models import HookedModel, ModelSpec
from mathcircuits.patching import KeyComponents, Metric, MetricName, get_metric
from mathcircuits.patching.key_components import resolve_heads
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.bootstrap import bootstrap_statistic

__all__ = [
    "discover_circuit",
]

EDGE_METHODS = {"exact": exact_edges, "reference": reference_edges}


def _receivers(node: Node, spec: ModelSpec, kinds: Sequence[str]) -> list[tuple[Receiver, bool]]:
    """The receivers of a node and whether each reads every position (k/v) or only the node's."""
    if node.kind == "mlp":
        return [(Receiver("mlp", node.layer), False)] if "mlp" in kinds else []
    out = []
    for kind in ("q", "k", "v"):
        if kind in kinds:
            r = Receiver(kind, node.layer, head=node.head, by_group=kind != "q").check(spec)
            out.append((r, kind != "q"))
    return out


def _check_key_heads(spec: ModelSpec, key_heads: list[tuple[int, int]] | None) -> None:
    for layer, head in key_heads or ():
        spec.check_head(layer, head)
    if key_heads is not None and not key_heads:
        raise FixableValueError("key_heads is empty. ", "pass None (scan the logits) or some (layer, head) pairs.")


@torch.no_grad()
def discover_circuit(
    model: HookedModel,
    pairs: PairSet,
    key_heads: KeyComponents | Sequence[tuple[int, int]] | None = None,
    config: CircuitConfig | None = None,
    *,
    metric: MetricName | Metric | None = None,
    uncertainty: Uncertainty | None = None,
    progress: bool | None = None,
    **settings: Any,
) -> Circuit:
    """Find the circuit behind the answer by iterated sender → receiver path patching (see the module docstring).

    Args:
        key_heads: round 0's senders by hand or a KeyComponents (each at the last prompt position, all kept);
            None scans every head and MLP at every answer position and keeps the ``logits_top_k`` strongest.
        config: the settings (the ``circuit`` section of a run); None: :class:`CircuitConfig`'s defaults.
            It reads ``depth``, ``threshold``, ``top_k``, ``logits_top_k``, ``senders``, ``receivers``,
            ``positions``, ``method``, ``screen``, ``metric``, ``saturation_tol``, ``mlps``, ``max_nodes``,
            ``max_seconds``, ``batch_size`` and ``n_boot``; each field's meaning is its help there.
        metric: replaces ``config.metric``, and may also be a :class:`~mathcircuits.patching.Metric`.
        uncertainty: the edges' bootstrap; None: ``config.uncertainty()``.
        **settings: fields of :class:`CircuitConfig` that replace the config's (``depth=6, screen=12``),
            checked by it.
        progress: a bar per round on stderr (None: on unless ``MATHCIRCUITS_PROGRESS=0``).
    """
    t0 = time.perf_counter()
    cpu0 = time.process_time()  # the budget counts this process's CPU seconds: a loaded machine finds the same circuit

    def over_budget() -> bool:
        return cfg.max_seconds is not None and time.process_time() - cpu0 >= cfg.max_seconds

    expect("discover_circuit", "model", model, HookedModel, "a HookedModel", "pass mc.load_model(...)'s result")
    expect_pairs("discover_circuit", "pairs", pairs, minimum=2)
    pairs.require_model(model, "discover_circuit")
    cfg = configured("discover_circuit", CircuitConfig, config, **settings)
    if uncertainty is None:
        uncertainty = cfg.uncertainty()
    else:
        configured("discover_circuit", CircuitConfig, cfg, n_boot=uncertainty.n_boot)  # the config's range
    spec = model.spec
    check_token_aligned(pairs, spec.vocab_size)
    if key_heads is not None:  # a selection (checked against this model) or (layer, head) pairs
        key_heads = list(resolve_heads(key_heads, spec, allow_empty=True, arg="key_heads"))
    _check_key_heads(spec, key_heads)
    m = get_metric(cfg.metric if metric is None else metric)
    edge_fn = EDGE_METHODS[cfg.method]
    data = DiscoveryBatches(model, pairs, cfg.positions, cfg.batch_size, m.needs_probs)
    parallel = data.caches[0].structure.parallel
    scorer = Scorer(model, pairs, cfg.positions, ["resample"], mlps=cfg.mlps, batch_size=cfg.batch_size)
    gap = float((scorer.clean - scorer.cf).mean())

    rows = torch.tensor([i for b in data.batches for i in b.idx], device="cpu")

    def interval(per_pair: torch.Tensor) -> tuple[float, float, float]:
        in_order = torch.empty_like(per_pair)
        in_order[rows] = per_pair  # the pairs' order: the interval does not depend on how pairs were batched
        iv = bootstrap_statistic(in_order[~in_order.isnan()], uncertainty=uncertainty)
        return iv.value, iv.low, iv.high

    sink = Node("logits", -1, -1, "logits")
    nodes: dict[str, Node] = {sink.name: sink}
    edges: list[Edge] = []
    memo: dict[tuple[str, str], list[tuple[Sender, torch.Tensor]]] = {}
    # round 0: senders → logits at every answer readout position
    cands = []
    first = [Sender("head", l, h) for l, h in key_heads] if key_heads is not None else None
    labels = data.answer_labels if first is None else [lab for lab in data.answer_labels if lab in ("last", "-1")]
    for label in progress_bar(progress, "circuit round 0: senders to the logits, per answer position", iterable=labels):
        chosen = first or upstream_senders(spec, Receiver("logits"), parallel, cfg.senders)
        found = measure_senders(data, Receiver("logits"), None, label, chosen, m, edge_fn, None)
        ranked = sorted(found, key=lambda c: -abs(float(c[1].nanmean())))
        strong = [c for c in ranked if abs(float(c[1].nanmean())) >= cfg.threshold]
        keep = ranked if first else strong[: cfg.logits_top_k]
        cands += [(s, label, per) for s, per in keep]
    frontier = []
    for s, label, per in cands:
        node = Node(s.kind, s.layer, s.head, label, depth=0)
        nodes.setdefault(node.name, node)
        frontier.append(node)
        edges.append(Edge(node.name, sink.name, "logits", *interval(per)))

    def score() -> float:
        c = Circuit(model=spec, nodes=tuple(nodes.values()), edges=tuple(edges), metric=m.name, method=cfg.method,
                    n_pairs=len(pairs), settings=CircuitSettings(positions=cfg.positions))  # fmt: skip
        return float((scorer.score("resample", [wiring_of(c)])[0] - scorer.cf).mean() / gap) if gap else float("nan")

    rounds = [DiscoveryRound(0, len(nodes) - 1, len(edges), score(), time.perf_counter() - t0)]
    stopped = "depth budget"
    for d in range(1, cfg.depth + 1):
        new_frontier = []
        out_of_time = False
        desc = f"circuit round {d} of ≤ {cfg.depth}: expanding {len(frontier)} nodes"
        for node in progress_bar(progress, desc, iterable=frontier):
            if over_budget():
                out_of_time = True  # the rest of this round's nodes stay unexpanded
                break
            for receiver, every in _receivers(node, spec, cfg.receivers):
                chosen = upstream_senders(spec, receiver, parallel, cfg.senders)
                if not chosen:
                    continue
                found = []
                for label in data.labels if every else [node.position]:
                    key = (receiver.name, label if every else f"{label}@{node.position}")
                    if every and not bool(data.readable(label, node.position).any()):
                        continue  # a key/value after the node's own position is never read by it
                    if key not in memo:  # a KV group is one receiver for all the query heads that share it
                        at = None if every else node.position
                        memo[key] = measure_senders(data, receiver, at, label, chosen, m, edge_fn, cfg.screen)
                    mask = (
                        data.readable(label, node.position)
                        if every
                        else torch.ones(data.n, dtype=torch.bool, device="cpu")
                    )
                    for s, per in memo[key]:
                        per = torch.where(mask, per, torch.full_like(per, float("nan")))
                        found.append((float(per.nanmean()), s, label, per))
                found = [c for c in found if abs(c[0]) >= cfg.threshold and c[0] == c[0]]
                for _, s, label, per in sorted(found, key=lambda c: -abs(c[0]))[: cfg.top_k]:
                    sender = Node(s.kind, s.layer, s.head, label, depth=d)
                    if sender.name not in nodes:
                        nodes[sender.name] = sender
                        new_frontier.append(sender)
                    shared = tuple(receiver.shared_by(spec)) if receiver.kind in ("k", "v") else ()
                    edges.append(Edge(sender.name, node.name, receiver.kind, *interval(per), shared))
        frontier = new_frontier
        rounds.append(DiscoveryRound(d, len(nodes) - 1, len(edges), score(), time.perf_counter() - t0))
        gain = rounds[-1].faithfulness - rounds[-2].faithfulness
        if out_of_time:
            stopped = f"time budget ({cfg.max_seconds:.0f} CPU s, during round {d})"
            break
        done, limit = round_saturated([r.faithfulness for r in rounds], cfg.saturation_tol or 0.0)
        if cfg.saturation_tol is not None and done:
            stopped = f"saturated (round {d} added {gain:+.3f} < {limit:.3f}: {cfg.saturation_tol} of the largest |F|)"
            break
        if not frontier:
            stopped = "no new nodes"
            break
        if cfg.max_nodes is not None and len(nodes) - 1 >= cfg.max_nodes:
            stopped = f"node budget ({cfg.max_nodes})"
            break
        if over_budget():
            stopped = f"time budget ({cfg.max_seconds:.0f} CPU s)"
            break
    return Circuit(
        model=spec,
        nodes=tuple(nodes.values()),
        edges=tuple(edges),
        metric=m.name,
        method=cfg.method,
        n_pairs=len(pairs),
        confidence=uncertainty.confidence,
        data=CircuitData(
            operations=sorted(set(pairs.operations)) if pairs.has("operation") else [],
            templates=sorted(set(pairs.template_ids)) if pairs.has("template_id") else [],
            pair_ids=list(pairs.pair_ids) if pairs.has("pair_id") else [],
        ),
        settings=CircuitSettings(
            key_heads=None if key_heads is None else list(key_heads),
            depth=cfg.depth,
            threshold=cfg.threshold,
            top_k=cfg.top_k,
            logits_top_k=cfg.logits_top_k,
            senders=list(cfg.senders),
            receivers=list(cfg.receivers),
            positions=cfg.positions,
            screen=cfg.screen,
            saturation_tol=cfg.saturation_tol,
            mlps=cfg.mlps,
            max_nodes=cfg.max_nodes,
            max_seconds=cfg.max_seconds,
            batch_size=cfg.batch_size,
            n_boot=uncertainty.n_boot,
            seed=uncertainty.seed,
            rounds=rounds,
            stopped=stopped,
        ),
        seconds=time.perf_counter() - t0,
    )
