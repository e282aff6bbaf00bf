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
from tqdm.auto import tqdm

from mathcircuits._errors import FixableValueError
from mathcircuits._schema import check_arguments, expect, expect_pairs
from mathcircuits.circuit.batches import POSITIONS
from mathcircuits.circuit.components import SENDER_KINDS, Receiver, Sender, upstream_senders
from mathcircuits.circuit.config import CircuitConfig, EdgeMethod, EdgeSender, MLPMode, ReceiverKind, ScanPositions
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

#: the library's defaults are the config's (the ``circuit`` section of a run), defined once there
_DEFAULT = CircuitConfig()
_BOOT = _DEFAULT.uncertainty()

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


#: settings discover_circuit shares with CircuitConfig, range-checked by it
_RANGED = ("depth", "threshold", "top_k", "logits_top_k", "screen", "saturation_tol", "max_nodes", "max_seconds",
           "batch_size")  # fmt: skip


def _check_args(spec: ModelSpec, kw: dict[str, Any]) -> None:
    if kw["method"] not in EDGE_METHODS:
        raise FixableValueError(f"method {kw['method']!r} is unknown. ", f"use one of {list(EDGE_METHODS)}.")
    if kw["positions"] not in POSITIONS:
        raise FixableValueError(f"positions {kw['positions']!r} is unknown. ", f"use one of {list(POSITIONS)}.")
    bad = [k for k in kw["receivers"] if k not in ("q", "k", "v", "mlp")]
    if bad or not kw["receivers"] or not kw["senders"] or any(k not in SENDER_KINDS for k in kw["senders"]):
        raise FixableValueError(
            f"senders {list(kw['senders'])} and receivers {list(kw['receivers'])}: both need at least one known kind. ",
            "senders from ('head', 'mlp'), receivers from ('q', 'k', 'v', 'mlp').",
        )
    if kw["screen"] is not None and kw["screen"] < kw["top_k"]:
        raise FixableValueError(
            f"screen={kw['screen']} is below top_k={kw['top_k']}, so too few edges would be measured. ",
            "screen ≥ top_k.",
        )
    if kw["depth"] < 0 or kw["top_k"] < 1 or kw["logits_top_k"] < 1:
        raise FixableValueError(
            f"depth={kw['depth']}, top_k={kw['top_k']}, logits_top_k={kw['logits_top_k']}: need depth ≥ 0 and "
            "both top-k ≥ 1. ",
            "pass such values.",
        )
    for layer, head in kw["key_heads"] or ():
        spec.check_head(layer, head)
    if kw["key_heads"] is not None and not kw["key_heads"]:
        raise FixableValueError("key_heads is empty. ", "pass None (scan the logits) or some (layer, head) pairs.")


@torch.no_grad()
def discover_circuit(
    model: HookedModel,
    pairs: PairSet,
    key_heads: KeyComponents | Sequence[tuple[int, int]] | None = None,
    depth: int = _DEFAULT.depth,
    threshold: float = _DEFAULT.threshold,
    top_k: int = _DEFAULT.top_k,
    logits_top_k: int = _DEFAULT.logits_top_k,
    senders: Sequence[EdgeSender] = _DEFAULT.senders,
    receivers: Sequence[ReceiverKind] = _DEFAULT.receivers,
    positions: ScanPositions = _DEFAULT.positions,
    metric: MetricName | Metric = _DEFAULT.metric,
    method: EdgeMethod = _DEFAULT.method,
    screen: int | None = _DEFAULT.screen,
    saturation_tol: float | None = _DEFAULT.saturation_tol,
    mlps: MLPMode = _DEFAULT.mlps,
    max_nodes: int | None = _DEFAULT.max_nodes,
    max_seconds: float | None = _DEFAULT.max_seconds,
    batch_size: int = _DEFAULT.batch_size,
    uncertainty: Uncertainty = _BOOT,
    progress: bool = False,
) -> Circuit:
    """Find the circuit behind the answer by iterated sender → receiver path patching (see the module docstring).

    Args:
        key_heads: round 0's senders by hand or a KeyComponents (each at the last prompt position, all kept);
            None scans every head and MLP at every answer position and keeps the ``logits_top_k`` strongest.
        depth: the most rounds after round 0 (a budget; ``saturation_tol`` may stop earlier).
        threshold: smallest ``|mean effect|`` an edge needs (metric units).
        method: ``"exact"`` (fast) or ``"reference"`` (two forwards per sender).
        screen: rank every sender with the attribution screen and measure only this many exactly.
        saturation_tol: fraction of the largest ``|F|`` so far (at least
            :data:`~mathcircuits.circuit.plateau.SATURATION_FLOOR`; None: run all ``depth`` rounds).
        mlps: how the saturation check treats MLPs outside the circuit.
        max_seconds: this process's CPU seconds (every thread's), so a loaded machine stops at the same point.
    """
    t0 = time.perf_counter()
    cpu0 = time.process_time()  # the budget counts this process's CPU seconds: a loaded machine finds the same circuit

    def over_budget() -> bool:
        return max_seconds is not None and time.process_time() - cpu0 >= max_seconds

    expect("discover_circuit", "model", model, HookedModel, "a HookedModel", "pass mc.load_model(...)'s result")
    expect_pairs("discover_circuit", "pairs", pairs, minimum=2)
    ranged = {k: v for k, v in locals().items() if k in _RANGED}
    check_arguments("discover_circuit", CircuitConfig, **ranged, n_boot=uncertainty.n_boot)
    spec = model.spec
    check_token_aligned(pairs, spec.vocab_size)
    if key_heads is not None:  # a selection (checked against this model) or (layer, head) pairs
        key_heads = list(resolve_heads(key_heads, spec, allow_empty=True, arg="key_heads"))
    _check_args(spec, locals())
    m = get_metric(metric)
    edge_fn = EDGE_METHODS[method]
    data = DiscoveryBatches(model, pairs, positions, batch_size, m.needs_probs)
    parallel = data.caches[0].structure.parallel
    scorer = Scorer(model, pairs, positions, ["resample"], mlps=mlps, batch_size=batch_size)
    gap = float((scorer.clean - scorer.cf).mean())

    rows = torch.tensor([i for b in data.batches for i in b.idx], device="cpu")

    def interval(per_pair: torch.Tensor) -> tuple[float, float, float]:
        in_order = torch.empty_like(per_pair)
        in_order[rows] = per_pair  # pairs order: the interval does not depend on how pairs were batched
        iv = bootstrap_statistic(in_order[~in_order.isnan()], uncertainty=uncertainty)
        return iv.value, iv.low, iv.high

    sink = Node("logits", -1, -1, "logits")
    nodes: dict[str, Node] = {sink.name: sink}
    edges: list[Edge] = []
    memo: dict[tuple[str, str], list[tuple[Sender, torch.Tensor]]] = {}
    # round 0: senders → logits at every answer readout position
    cands = []
    first = [Sender("head", l, h) for l, h in key_heads] if key_heads is not None else None
    for label in data.answer_labels if first is None else [lab for lab in data.answer_labels if lab in ("last", "-1")]:
        chosen = first or upstream_senders(spec, Receiver("logits"), parallel, senders)
        found = measure_senders(data, Receiver("logits"), None, label, chosen, m, edge_fn, None)
        ranked = sorted(found, key=lambda c: -abs(float(c[1].nanmean())))
        keep = ranked if first else [c for c in ranked if abs(float(c[1].nanmean())) >= threshold][:logits_top_k]
        cands += [(s, label, per) for s, per in keep]
    frontier = []
    for s, label, per in cands:
        node = Node(s.kind, s.layer, s.head, label, depth=0)
        nodes.setdefault(node.name, node)
        frontier.append(node)
        edges.append(Edge(node.name, sink.name, "logits", *interval(per)))

    def score() -> float:
        c = Circuit(model=spec, nodes=tuple(nodes.values()), edges=tuple(edges), metric=m.name, method=method,
                    n_pairs=len(pairs), settings=CircuitSettings(positions=positions))  # fmt: skip
        return float((scorer.score("resample", [wiring_of(c)])[0] - scorer.cf).mean() / gap) if gap else float("nan")

    rounds = [DiscoveryRound(0, len(nodes) - 1, len(edges), score(), time.perf_counter() - t0)]
    stopped = "depth budget"
    for d in range(1, depth + 1):
        new_frontier = []
        out_of_time = False
        for node in tqdm(frontier, disable=not progress, desc=f"circuit round {d}"):
            if over_budget():
                out_of_time = True  # the rest of this round's nodes stay unexpanded
                break
            for receiver, every in _receivers(node, spec, receivers):
                chosen = upstream_senders(spec, receiver, parallel, senders)
                if not chosen:
                    continue
                found = []
                for label in data.labels if every else [node.position]:
                    key = (receiver.name, label if every else f"{label}@{node.position}")
                    if every and not bool(data.readable(label, node.position).any()):
                        continue  # a key/value after the node's own position is never read by it
                    if key not in memo:  # a KV group is one receiver for all the query heads that share it
                        at = None if every else node.position
                        memo[key] = measure_senders(data, receiver, at, label, chosen, m, edge_fn, screen)
                    mask = (
                        data.readable(label, node.position)
                        if every
                        else torch.ones(data.n, dtype=torch.bool, device="cpu")
                    )
                    for s, per in memo[key]:
                        per = torch.where(mask, per, torch.full_like(per, float("nan")))
                        found.append((float(per.nanmean()), s, label, per))
                found = [c for c in found if abs(c[0]) >= threshold and c[0] == c[0]]
                for _, s, label, per in sorted(found, key=lambda c: -abs(c[0]))[:top_k]:
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
            stopped = f"time budget ({max_seconds:.0f} CPU s, during round {d})"
            break
        done, limit = round_saturated([r.faithfulness for r in rounds], saturation_tol or 0.0)
        if saturation_tol is not None and done:
            stopped = f"saturated (round {d} added {gain:+.3f} < {limit:.3f}: {saturation_tol} of the largest |F|)"
            break
        if not frontier:
            stopped = "no new nodes"
            break
        if max_nodes is not None and len(nodes) - 1 >= max_nodes:
            stopped = f"node budget ({max_nodes})"
            break
        if over_budget():
            stopped = f"time budget ({max_seconds:.0f} CPU s)"
            break
    return Circuit(
        model=spec,
        nodes=tuple(nodes.values()),
        edges=tuple(edges),
        metric=m.name,
        method=method,
        n_pairs=len(pairs),
        confidence=uncertainty.confidence,
        data=CircuitData(
            operations=sorted(set(pairs.operations)) if pairs.has("operation") else [],
            templates=sorted(set(pairs.template_ids)) if pairs.has("template_id") else [],
            pair_ids=list(pairs.pair_ids) if pairs.has("pair_id") else [],
        ),
        settings=CircuitSettings(
            key_heads=None if key_heads is None else list(key_heads),
            depth=depth,
            threshold=threshold,
            top_k=top_k,
            logits_top_k=logits_top_k,
            senders=list(senders),
            receivers=list(receivers),
            positions=positions,
            screen=screen,
            saturation_tol=saturation_tol,
            mlps=mlps,
            max_nodes=max_nodes,
            max_seconds=max_seconds,
            batch_size=batch_size,
            n_boot=uncertainty.n_boot,
            seed=uncertainty.seed,
            rounds=rounds,
            stopped=stopped,
        ),
        seconds=time.perf_counter() - t0,
    )
