"""Circuits of every size from one found circuit, and depth-matched random circuits of the same shape.

**Top-n circuits.** The edges are ordered strongest first while staying connected to the logits:
starting from the logits, the next edge is the one with the largest ``|effect|`` among those whose
receiver is already in the circuit. Every prefix of that order is then a circuit rooted at the logits
(an edge whose receiver is not yet reached waits for it), and the top-n circuit is the first ``n``
edges with their end nodes. Nodes enter in the order their first edge does; the node-level circuit
of size ``n`` is the top-n edges' nodes.

**Random circuits.** A random circuit of size ``n`` keeps the top-n circuit's shape (its edges and
which input each enters) and replaces each node by a random component of the same kind at the same
layer and position (depth-matched), drawn without replacement from those not in the circuit; an MLP
(one per layer) is replaced by an MLP at the same position from a layer that keeps its edges valid.
Where no replacement exists the node stays.

Usage::

    order = edge_order(circuit)
    small = top_wiring(circuit, order, 5, level="edges")
    rand = random_wiring(circuit, order, 5, "edges", random.Random(0), parallel=False)
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from mathcircuits.circuit.components import Receiver, Sender
from mathcircuits.circuit.intervene import LOGITS, Wiring
from mathcircuits.circuit.result import Circuit, Edge, Node
from mathcircuits.circuit.wiring import NodeKey

__all__: list[str] = []


def node_key(node: Node) -> NodeKey:
    """The run's key of a circuit node (:data:`~.intervene.LOGITS` for the sink)."""
    return LOGITS if node.kind == "logits" else (node.kind, node.layer, node.head, node.position)


def edge_order(circuit: Circuit) -> list[Edge]:
    """The edges strongest first, each one's receiver already connected to the logits (see the module docstring)."""
    remaining = sorted(circuit.edges, key=lambda e: (-abs(e.effect), e.sender, e.receiver, e.via))
    connected = {"logits"}
    out: list[Edge] = []
    while remaining:
        nxt = next((e for e in remaining if e.receiver in connected), None)
        if nxt is None:  # the rest never reach the logits (a circuit built by hand): append them as they are
            out += remaining
            break
        out.append(nxt)
        remaining.remove(nxt)
        connected.add(nxt.sender)
    return out


def top_nodes(circuit: Circuit, order: Sequence[Edge]) -> list[str]:
    """Node names (not the logits) in the order their first edge enters; nodes without edges last."""
    seen: dict[str, None] = {}
    for e in order:
        seen.setdefault(e.sender, None)
    for n in circuit.nodes:
        if n.kind != "logits":
            seen.setdefault(n.name, None)
    return list(seen)


def _edge_keys(circuit: Circuit, edges: Sequence[Edge]) -> frozenset[tuple[NodeKey, NodeKey, str]]:
    keys = {n.name: node_key(n) for n in circuit.nodes}
    return frozenset((keys[e.sender], keys[e.receiver], e.via) for e in edges)


def top_wiring(circuit: Circuit, order: Sequence[Edge], n: int, level: str) -> Wiring:
    """The top-n circuit (``n`` edges, or ``n`` nodes when the circuit has no edges) at edge or node level."""
    keys = {c.name: node_key(c) for c in circuit.nodes}
    if order:
        chosen = list(order[:n])
        nodes = frozenset(keys[e.sender] for e in chosen) | frozenset(
            keys[e.receiver] for e in chosen if e.receiver != "logits"
        )
    else:
        chosen = []
        nodes = frozenset(keys[name] for name in top_nodes(circuit, order)[:n])
    return Wiring(nodes, _edge_keys(circuit, chosen) if level == "edges" and order else None)


def top_circuit(circuit: Circuit, n: int) -> Circuit:
    """The top-n circuit as a :class:`Circuit` (its first ``n`` edges in :func:`edge_order` and their nodes)."""
    edges = tuple(edge_order(circuit)[:n])
    names = {"logits"} | {e.sender for e in edges} | {e.receiver for e in edges}
    return replace(circuit, nodes=tuple(c for c in circuit.nodes if c.name in names), edges=edges)


def wiring_of(circuit: Circuit, level: str = "edges") -> Wiring:
    """The whole circuit as a wiring (edge level when it has edges)."""
    return top_wiring(circuit, edge_order(circuit), len(circuit.edges) or len(circuit.nodes), level)


def size_grid(n_max: int, points: int) -> list[int]:
    """Sizes 0, 1, 2, … n_max, spaced about geometrically, at most ``points`` of them (0 and n_max always)."""
    if n_max <= 0:
        return [0]
    if points >= n_max + 1:
        return list(range(n_max + 1))
    sizes = {0, n_max}
    ratio = n_max ** (1 / max(1, points - 2))
    x = 1.0
    while len(sizes) < points and x < n_max:
        sizes.add(int(round(x)))
        x = max(x * ratio, x + 1)
    return sorted(sizes)


def _valid(edges: frozenset[tuple[NodeKey, NodeKey, str]], parallel: bool) -> bool:
    for s, r, _ in edges:
        if r == LOGITS:
            continue
        sender = Sender("head", s[1], s[2]) if s[0] == "head" else Sender("mlp", s[1])
        if not Receiver("mlp" if r[0] == "mlp" else "q", r[1]).is_downstream_of(sender, parallel):
            return False
    return True


def random_wiring(
    circuit: Circuit,
    order: Sequence[Edge],
    n: int,
    level: str,
    rng: random.Random,
    parallel: bool,
    n_heads: int,
    n_layers: int,
    tries: int = 20,
) -> Wiring:
    """A depth-matched random circuit with the shape of the top-n circuit (see the module docstring)."""
    base = top_wiring(circuit, order, n, level)
    taken = set(base.nodes)
    for _ in range(tries):
        used: set[NodeKey] = set()
        swap: dict[NodeKey, NodeKey] = {}
        for key in sorted(base.nodes):
            kind, layer, _, label = key
            if kind == "head":
                pool = [("head", layer, h, label) for h in range(n_heads)]
            else:
                pool = [("mlp", m, -1, label) for m in range(max(0, layer - 2), min(n_layers, layer + 3))]
            pool = [c for c in pool if c not in taken and c not in used]
            swap[key] = rng.choice(pool) if pool else key
            used.add(swap[key])
        nodes = frozenset(swap.values())
        edges = None
        if base.edges is not None:
            edges = frozenset((swap[s], r if r == LOGITS else swap[r], via) for s, r, via in base.edges)
            if not _valid(edges, parallel):
                continue
        return Wiring(nodes, edges)
    keep_mlps = {k: k for k in base.nodes if k[0] == "mlp"}  # MLPs that never fit stay where they are
    swap = {k: keep_mlps.get(k, k) for k in base.nodes}
    heads = sorted(k for k in base.nodes if k[0] == "head")
    used = set()
    for key in heads:
        pool = [("head", key[1], h, key[3]) for h in range(n_heads)]
        pool = [c for c in pool if c not in taken and c not in used]
        swap[key] = rng.choice(pool) if pool else key
        used.add(swap[key])
    edges = None
    if base.edges is not None:
        edges = frozenset((swap[s], r if r == LOGITS else swap[r], via) for s, r, via in base.edges)
    return Wiring(frozenset(swap.values()), edges)
