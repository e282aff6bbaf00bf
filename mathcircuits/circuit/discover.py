"""Circuit discovery: iterate sender → receiver path patching back from the key components.

Method (Wang et al. 2023 §3; Zhang et al. 2024, App. B): start from the key heads (the
senders that matter to the logits, found by :func:`~mathcircuits.patching.path_patch`).
For each node at position ``t`` ask which senders matter to its inputs:

* a head's query at ``t``: only senders at ``t`` can change it (heads are frozen, so a
  patch elsewhere never reaches ``t``), so they are patched at ``t``;
* the key and value of its KV group: patched at each scanned position ``p`` separately,
  so an edge says which token's key/value carries the information;
* an MLP's input at ``t``: senders at ``t``.

Senders whose mean effect has ``|effect| ≥ threshold`` (the ``top_k`` strongest per
receiver) become edges, and new senders become nodes of the next round, to ``depth``
rounds. The scanned positions are the token roles of the prompt (``A``, ``B``, ``op``,
``last``; ``positions="roles"``) or every position after the few-shot prefix
(``positions="suffix"``). Effects are per pair; an edge's interval is a percentile
bootstrap over pairs (:func:`mathcircuits.stats.bootstrap_statistic`).

Usage::

    key = select_key_components(path_patch(model, ds))
    circuit = discover_circuit(model, ds, key.heads[:5], depth=2)
    circuit.to_dataframe()
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from mathcircuits.circuit.attribution import attribute_edges
from mathcircuits.circuit.components import SENDER_KINDS, Receiver, Sender, upstream_senders
from mathcircuits.circuit.config import EdgeMethod, EdgeSender, ReceiverKind, ScanPositions
from mathcircuits.circuit.edges import exact_edges
from mathcircuits.circuit.pair_cache import PairCache, pair_cache
from mathcircuits.circuit.reference import reference_edges
from mathcircuits.circuit.result import Circuit, CircuitData, CircuitSettings, Edge, Node
from mathcircuits.data.batching import iter_batches
from mathcircuits.data.pairs import PairSet, check_token_aligned
from mathcircuits.models import HookedModel
from mathcircuits.patching import Metric, MetricName, get_metric, path_patch
from mathcircuits.stats import bootstrap_statistic

__all__ = ["ROLES", "discover_circuit", "scan_positions"]

ROLES = {"A": "pos_a", "B": "pos_b", "op": "pos_op", "last": "pos_last"}
EDGE_METHODS = {"exact": exact_edges, "reference": reference_edges}


def scan_positions(batch: dict[str, torch.Tensor], positions: str, seq: int) -> dict[str, int]:
    """Label → absolute position for one batch of equal-length pairs.

    Args:
        batch: the batch's columns (``pos_a``, ``pos_b``, ``pos_op``, ``pos_last``, ``prefix_len``).
        positions: ``"roles"`` (the prompt's token roles) or ``"suffix"`` (every position after the prefix).
        seq: the prompts' token length.

    Returns:
        ``{"A": 31, "B": 33, ...}`` or ``{"-8": 30, ..., "-1": 37}``.
    """
    if positions == "roles":
        out = {}
        for label, col in ROLES.items():
            vals = set(batch[col].tolist())
            if len(vals) != 1:
                raise ValueError(
                    f"the pairs of one length have their {label} token at different positions {sorted(vals)}. "
                    "Fix: use pairs of one template, or positions='suffix'."
                )
            out[label] = vals.pop() % seq
        return out
    if positions == "suffix":
        start = int(batch["prefix_len"].min())
        return {str(p - seq): p for p in range(start, seq)}
    raise ValueError(f"positions {positions!r} is unknown. Fix: use 'roles' or 'suffix'.")


def _receivers(node: Node, spec: Any, kinds: Sequence[str]) -> list[tuple[Receiver, bool]]:
    """The receivers of a node and whether each reads every position (k/v) or only the node's."""
    if node.kind == "mlp":
        return [(Receiver("mlp", node.layer), False)] if "mlp" in kinds else []
    out = []
    for kind in ("q", "k", "v"):
        if kind in kinds:
            r = Receiver(kind, node.layer, head=node.head, by_group=kind != "q").check(spec)
            out.append((r, kind != "q"))
    return out


def _measure(
    model: HookedModel,
    batches: list[tuple[PairCache, dict[str, int]]],
    receiver: Receiver,
    at: str,
    label: str,
    senders: list[Sender],
    metric: Any,
    edge_fn: Any,
    screen: int | None,
) -> list[tuple[Sender, torch.Tensor]]:
    """Per-pair effects of senders patched at ``label`` on the receiver (read at ``at`` for q/MLP), over all batches.

    With ``screen``, every sender is first estimated by the attribution screen and only the ``screen``
    with the largest ``|mean estimate|`` are measured by ``edge_fn``.
    """

    def run(fn: Any, chosen: list[Sender]) -> torch.Tensor:
        per_pair = []
        for cache, where in batches:
            r = receiver
            if receiver.kind in ("q", "mlp"):
                r = Receiver(receiver.kind, receiver.layer, receiver.head, position=where[at])
            per_pair.append(fn(model, cache, r, chosen, [where[label]], metric).effects)
        return torch.cat(per_pair)  # [pair, sender]

    if screen is not None and screen < len(senders):
        estimate = run(attribute_edges, senders).mean(0).abs()
        keep = sorted(torch.topk(estimate, screen).indices.tolist())
        senders = [senders[i] for i in keep]
    eff = run(edge_fn, senders)
    return [(s, eff[:, j]) for j, s in enumerate(senders)]


@torch.no_grad()
def discover_circuit(
    model: HookedModel,
    dataset: PairSet,
    key_heads: Sequence[tuple[int, int]],
    depth: int = 2,
    threshold: float = 0.01,
    top_k: int = 4,
    senders: Sequence[EdgeSender] = ("head", "mlp"),
    receivers: Sequence[ReceiverKind] = ("q", "k", "v", "mlp"),
    positions: ScanPositions = "roles",
    metric: MetricName | Metric = "relative_logit",
    method: EdgeMethod = "exact",
    screen: int | None = None,
    batch_size: int = 8,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    progress: bool = False,
) -> Circuit:
    """Find the circuit behind the key heads by iterated sender → receiver path patching.

    Args:
        model: the hooked model.
        dataset: token-aligned pairs (:func:`mathcircuits.data.generate_pairs`), with token-role columns.
        key_heads: the heads that write the answer (e.g. ``select_key_components(...).heads``).
        depth: rounds of "which senders feed these nodes".
        threshold: smallest ``|mean effect|`` an edge needs (in the metric's units).
        top_k: at most this many edges per receiver.
        senders: ``"head"`` and/or ``"mlp"``.
        receivers: which inputs are scanned: ``"q"``, ``"k"``, ``"v"``, ``"mlp"``.
        positions: ``"roles"`` or ``"suffix"`` (see :func:`scan_positions`).
        metric: a metric name of :data:`~mathcircuits.patching.METRICS`.
        method: ``"exact"`` (fast) or ``"reference"`` (two forwards per sender).
        screen: if given, estimate every edge with the attribution screen
            (:func:`~mathcircuits.circuit.attribution.attribute_edges`, one forward and backward per receiver)
            and measure only this many senders per receiver and position by ``method``; None measures all.
        batch_size: pairs per batch.
        n_boot, confidence, seed: the percentile bootstrap over pairs.
        progress: show a progress bar per round.

    Returns:
        A :class:`Circuit`.
    """
    t0 = time.perf_counter()
    spec = model.spec
    check_token_aligned(dataset, spec.vocab_size)
    if method not in EDGE_METHODS:
        raise ValueError(f"method {method!r} is unknown. Fix: use one of {list(EDGE_METHODS)}.")
    bad = [k for k in receivers if k not in ("q", "k", "v", "mlp")]
    if bad or not receivers or not senders or any(k not in SENDER_KINDS for k in senders):
        raise ValueError(
            f"senders {list(senders)} and receivers {list(receivers)}: both need at least one known kind. "
            "Fix: senders from ('head', 'mlp'), receivers from ('q', 'k', 'v', 'mlp')."
        )
    if screen is not None and screen < top_k:
        raise ValueError(
            f"screen={screen} is below top_k={top_k}, so too few edges would be measured. Fix: screen ≥ top_k."
        )
    if depth < 0 or top_k < 1:
        raise ValueError(f"depth={depth}, top_k={top_k}: need depth ≥ 0 and top_k ≥ 1. Fix: pass such values.")
    for layer, head in key_heads:
        spec.check_head(layer, head)
    if not key_heads:
        raise ValueError("no key heads given. Fix: pass select_key_components(path_patch(model, ds)).heads.")
    m = get_metric(metric)
    edge_fn = EDGE_METHODS[method]
    cols = {c: dataset[c] for c in ("tokens", "cf_tokens", "answer_token", "prefix_len")}
    for col in ROLES.values():  # a role spanning several tokens (a two-digit operand) is read at its last token
        cols[col] = [p[-1] if isinstance(p, (list, tuple)) else p for p in dataset[col]]
    batches: list[tuple[PairCache, dict[str, int]]] = []
    for _, b in iter_batches(cols, batch_size, model.device):
        cache = pair_cache(model, b["tokens"], b["cf_tokens"], b["answer_token"], m.needs_probs)
        batches.append((cache, scan_positions(b, positions, b["tokens"].shape[1])))
    labels = list(batches[0][1])
    parallel = batches[0][0].structure.parallel

    def interval(per_pair: torch.Tensor) -> tuple[float, float, float]:
        iv = bootstrap_statistic(per_pair, n_boot=n_boot, seed=seed, confidence=confidence)
        return iv.value, iv.low, iv.high

    # round 0: key heads → logits, from the exact logits scan (per pair)
    logits_scan = path_patch(model, dataset, senders=("heads",), metric=m, batch_size=batch_size, keep_per_pair=True)
    sink = Node("logits", -1, -1, "logits")
    nodes: dict[str, Node] = {sink.name: sink}
    edges: list[Edge] = []
    memo: dict[tuple[str, str, str], list[tuple[Sender, torch.Tensor]]] = {}
    frontier = []
    for layer, head in key_heads:
        node = Node("head", layer, head, "last" if positions == "roles" else "-1", depth=0)
        nodes[node.name] = node
        frontier.append(node)
        eff, lo, hi = interval(logits_scan.per_pair_heads[:, layer, head])
        edges.append(Edge(node.name, sink.name, "logits", eff, lo, hi))
    for d in range(1, depth + 1):
        new_frontier = []
        for node in tqdm(frontier, disable=not progress, desc=f"circuit round {d}"):
            for receiver, all_positions in _receivers(node, spec, receivers):
                chosen = upstream_senders(spec, receiver, parallel, senders)
                if not chosen:
                    continue
                scan = labels if all_positions else [node.position]
                cands = []
                for label in scan:
                    key = (receiver.name, node.position if not all_positions else "*", label)
                    if key not in memo:  # a KV group is one receiver for all the query heads that share it
                        memo[key] = _measure(model, batches, receiver, node.position, label, chosen, m, edge_fn, screen)
                    for s, per in memo[key]:
                        cands.append((float(per.mean()), s, label, per))
                cands = [c for c in cands if abs(c[0]) >= threshold]
                for _, s, label, per in sorted(cands, key=lambda c: -abs(c[0]))[:top_k]:
                    sender = Node(s.kind, s.layer, s.head, label, depth=d)
                    if sender.name not in nodes:
                        nodes[sender.name] = sender
                        new_frontier.append(sender)
                    eff, lo, hi = interval(per)
                    shared = tuple(receiver.shared_by(spec)) if receiver.kind in ("k", "v") else ()
                    edges.append(Edge(sender.name, node.name, receiver.kind, eff, lo, hi, shared))
        frontier = new_frontier
    return Circuit(
        model=spec,
        nodes=tuple(nodes.values()),
        edges=tuple(edges),
        metric=m.name,
        method=method,
        n_pairs=len(dataset),
        confidence=confidence,
        data=CircuitData(
            operations=sorted(set(dataset["operation"])) if "operation" in dataset.column_names else [],
            templates=sorted(set(dataset["template_id"])) if "template_id" in dataset.column_names else [],
            pair_ids=list(dataset["pair_id"]) if "pair_id" in dataset.column_names else [],
        ),
        settings=CircuitSettings(
            key_heads=[list(h) for h in key_heads],
            depth=depth,
            threshold=threshold,
            top_k=top_k,
            senders=list(senders),
            receivers=list(receivers),
            positions=positions,
            screen=screen,
            batch_size=batch_size,
            n_boot=n_boot,
            seed=seed,
        ),
        seconds=time.perf_counter() - t0,
    )
