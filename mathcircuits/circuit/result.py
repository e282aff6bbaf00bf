"""The value circuit discovery returns: a :class:`Circuit` of nodes and edges.

A node is a component (head ``L14.H2`` or ``MLP3``) at a token position, named by the
position's role in the prompt (``A``, ``B``, ``op``, ``last``), by its offset from the
end of the prompt (``-3``) or by its place in the teacher-forced answer (``ans1``: the
position holding the answer's first token); ``logits`` is the sink. An edge is a sender → receiver path-patching effect
(mean over pairs, with a percentile bootstrap interval over pairs); ``via`` says which
input of the receiver it enters (``q``, ``k``, ``v``, ``mlp``, or ``logits``). A key or value
edge on a GQA model enters a KV group: ``shared_by`` lists the query heads reading it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from mathcircuits._io import SavedResult
from mathcircuits.models.spec import ModelSpec, as_spec, check_model

__all__ = ["Circuit", "Edge", "Node"]


@dataclass(frozen=True)
class Node:
    """A component at a position.

    Args:
        kind: ``"head"``, ``"mlp"`` or ``"logits"``.
        layer: its layer (``-1`` for the logits).
        head: the query head (``-1`` otherwise).
        position: the position's label (``A``, ``B``, ``op``, ``last``, an offset ``"-3"``, or ``ans1``, ...).
        depth: 1 for the senders to the logits (0 for key heads given by hand), 2 for their senders, ...
        role: a short reading of what it does (e.g. ``operand mover``), from its attention and edges.
    """

    kind: str
    layer: int
    head: int
    position: str
    depth: int = 0
    role: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("head", "mlp", "logits"):
            raise ValueError(f"circuit node kind {self.kind!r} is unknown. Fix: use 'head', 'mlp' or 'logits'.")

    @property
    def component(self) -> str:
        if self.kind == "logits":
            return "logits"
        return f"L{self.layer}.H{self.head}" if self.kind == "head" else f"MLP{self.layer}"

    @property
    def name(self) -> str:
        return "logits" if self.kind == "logits" else f"{self.component}@{self.position}"


@dataclass(frozen=True)
class Edge:
    """A sender → receiver effect, averaged over pairs, with its bootstrap interval.

    Args:
        sender: the sending node's name; receiver: the receiving node's name.
        via: which input of the receiver (``q``, ``k``, ``v``, ``mlp`` or ``logits``).
        effect: mean effect over pairs under the circuit's metric; low, high: its interval.
        shared_by: for k/v: the query heads of the KV group the edge enters.
    """

    sender: str
    receiver: str
    via: str
    effect: float
    low: float
    high: float
    shared_by: tuple[int, ...] = ()


@dataclass(frozen=True)
class Circuit(SavedResult):
    """Nodes and edges found by iterating sender → receiver path patching from the key components.

    ``settings`` records how it was found (depth, threshold, top_k, positions, method, batch size,
    bootstrap), ``data`` the pairs (operations, templates, pair ids), ``model`` the model's spec.
    """

    VERSION = 1
    STAGE = "circuit"

    model: ModelSpec | dict[str, Any]
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    metric: str
    method: str
    n_pairs: int
    confidence: float = 0.95
    data: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: float = float("nan")

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", as_spec(self.model))
        spec = self.model
        for n in self.nodes:
            if n.kind == "head":
                spec.check_head(n.layer, n.head)
            elif n.kind == "mlp" and not 0 <= n.layer < spec.n_layers:
                raise ValueError(
                    f"circuit node {n.name}: layer {n.layer} is outside {spec.describe()} "
                    f"(layers 0..{spec.n_layers - 1}). Fix: name existing components."
                )
        names = {n.name for n in self.nodes}
        dangling = [e for e in self.edges if e.sender not in names or e.receiver not in names]
        if dangling:
            e = dangling[0]
            raise ValueError(
                f"edge {e.sender} → {e.receiver} names a node the circuit does not have. "
                "Fix: build circuits with discover_circuit(), or list both nodes."
            )

    def __repr__(self) -> str:
        heads = sum(n.kind == "head" for n in self.nodes)
        mlps = sum(n.kind == "mlp" for n in self.nodes)
        return (
            f"Circuit({self.model.name}: {heads} head nodes, {mlps} MLP nodes, {len(self.edges)} edges; "
            f"{self.method}, metric {self.metric}, {self.n_pairs} pairs)"
        )

    def _repr_html_(self) -> str:
        top = "".join(
            f"<li>{e.sender} → {e.receiver} ({e.via}): {e.effect:+.3f} [{e.low:+.3f}, {e.high:+.3f}]</li>"
            for e in self.strongest_edges(5)
        )
        return f"<b>{repr(self)}</b><ul>{top}</ul>"

    def check_model(self, model: Any) -> None:
        """Refuse a model other than the one the circuit was found on."""
        check_model(self.model, model, "this circuit", "discover the circuit on this model")

    @property
    def heads(self) -> list[tuple[int, int]]:
        """The circuit's attention heads (any position), sorted."""
        return sorted({(n.layer, n.head) for n in self.nodes if n.kind == "head"})

    def node(self, name: str) -> Node:
        """The node of a name; a clear error for an unknown one."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"the circuit has no node {name!r}. Fix: use one of {[n.name for n in self.nodes]}.")

    def strongest_edges(self, k: int = 10) -> list[Edge]:
        """The k edges with the largest absolute effect."""
        return sorted(self.edges, key=lambda e: -abs(e.effect))[:k]

    def to_dataframe(self):
        """One row per edge: sender, receiver, via, effect, low, high, shared_by, sender and receiver roles."""

        roles = {n.name: n.role for n in self.nodes}
        rows = [
            {
                "sender": e.sender,
                "receiver": e.receiver,
                "via": e.via,
                "effect": e.effect,
                "low": e.low,
                "high": e.high,
                "shared_by": list(e.shared_by),
                "sender_role": roles.get(e.sender, ""),
                "receiver_role": roles.get(e.receiver, ""),
            }
            for e in self.edges
        ]
        cols = ["sender", "receiver", "via", "effect", "low", "high", "shared_by", "sender_role", "receiver_role"]
        return pd.DataFrame(rows, columns=cols)
