"""The values circuit discovery returns: a :class:`Circuit` of nodes and edges, and its :class:`Faithfulness`.

A node is a component (head ``L14.H2`` or ``MLP3``) at a token position, named by the
position's role in the prompt (``A``, ``B``, ``op``, ``last``) or by its offset from the
end (``-3``); ``logits`` is the sink. An edge is a sender → receiver path-patching effect
(mean over pairs, with a percentile bootstrap interval over pairs); ``via`` says which
input of the receiver it enters (``q``, ``k``, ``v``, ``mlp``, or ``logits``). A key or value
edge on a GQA model enters a KV group: ``shared_by`` lists the query heads reading it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
from torch import nn

from mathcircuits._io import SavedResult
from mathcircuits.circuit.config import EdgeSender, ReceiverKind, ScanPositions
from mathcircuits.models import Head, HookedModel
from mathcircuits.models.spec import ModelSpec, check_model

__all__ = ["Circuit", "CircuitData", "CircuitSettings", "Edge", "Faithfulness", "FaithfulnessSettings", "Node"]


@dataclass(frozen=True)
class Node:
    """A component at a position.

    Args:
        kind: ``"head"``, ``"mlp"`` or ``"logits"``.
        layer: its layer (``-1`` for the logits).
        head: the query head (``-1`` otherwise).
        position: the position's role (``A``, ``B``, ``op``, ``last``) or offset from the end (``"-3"``).
        depth: 0 for the key components (senders to the logits), 1 for their senders, ...
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
        return str(Head(self.layer, self.head)) if self.kind == "head" else f"MLP{self.layer}"

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
class CircuitData:
    """The pairs a circuit was found on: their operations, templates and pair ids."""

    operations: list[str] = field(default_factory=list)
    templates: list[str] = field(default_factory=list)
    pair_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class CircuitSettings:
    """How a circuit was found (the arguments of :func:`~mathcircuits.circuit.discover_circuit`)."""

    key_heads: list[list[int]] = field(default_factory=list)
    depth: int = 2
    threshold: float = 0.0
    top_k: int = 0
    senders: list[EdgeSender] = field(default_factory=list)
    receivers: list[ReceiverKind] = field(default_factory=list)
    positions: ScanPositions = "roles"
    screen: int | None = None
    batch_size: int = 16
    n_boot: int = 0
    seed: int = 0


@dataclass(frozen=True)
class FaithfulnessSettings:
    """How faithfulness was measured: random circuits drawn, bootstrap resamples, seed, and the head means used."""

    n_random: int = 0
    n_boot: int = 0
    seed: int = 0
    means: str = ""


@dataclass(frozen=True, repr=False)
class Circuit(SavedResult):
    """Nodes and edges found by iterating sender → receiver path patching from the key components.

    ``settings`` records how it was found (depth, threshold, top_k, positions, method, batch size,
    bootstrap), ``data`` the pairs (operations, templates, pair ids), ``model`` the model's spec.
    """

    VERSION = 1
    STAGE = "circuit"

    model: ModelSpec
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    metric: str
    method: str
    n_pairs: int
    confidence: float = 0.95
    data: CircuitData = CircuitData()
    settings: CircuitSettings = CircuitSettings()
    seconds: float = float("nan")

    def __post_init__(self) -> None:
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

    def check_model(self, model: ModelSpec | HookedModel | nn.Module) -> None:
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

    def summary_items(self) -> list[tuple[str, str]]:
        """Model, nodes, edges, pairs and the strongest edge."""
        top = self.strongest_edges(1)
        edge = f"{top[0].sender} → {top[0].receiver} {top[0].effect:+.3g}" if top else "none"
        return [
            ("model", self.model.name),
            ("nodes", str(len(self.nodes))),
            ("edges", str(len(self.edges))),
            ("pairs", str(self.n_pairs)),
            ("strongest edge", edge),
        ]


@dataclass(frozen=True, repr=False)
class Faithfulness(SavedResult):
    """How much of the task the circuit's heads carry, with every other head mean-ablated (Wang et al. 2023).

    ``F(x)`` is the mean log-probability of the answer's first token. Faithfulness is
    ``(F(circuit) − F(none)) / (F(full) − F(none))`` (1: the circuit alone does what the model
    does; 0: no better than ablating every head), with a bootstrap interval over pairs.
    ``minimality[node]`` is the faithfulness lost when that head is also ablated;
    ``random`` are the faithfulness values of random head sets of the circuit's size.
    """

    VERSION = 1
    STAGE = "circuit"

    model: ModelSpec
    heads: tuple[tuple[int, int], ...]
    faithfulness: float
    low: float
    high: float
    f_full: float
    f_circuit: float
    f_none: float
    minimality: dict[str, float] = field(default_factory=dict)
    random: tuple[float, ...] = ()
    n_pairs: int = 0
    confidence: float = 0.95
    settings: FaithfulnessSettings = FaithfulnessSettings()

    @property
    def random_share_below(self) -> float:
        """Share of random circuits of equal size whose faithfulness is below the circuit's."""
        if not self.random:
            return float("nan")
        return sum(r < self.faithfulness for r in self.random) / len(self.random)

    def summary_items(self) -> list[tuple[str, str]]:
        """Model, the circuit's heads and its faithfulness with the interval."""
        return [
            ("model", self.model.name),
            ("heads", str(len(self.heads))),
            ("pairs", str(self.n_pairs)),
            ("faithfulness", f"{self.faithfulness:.3f} [{self.low:.3f}, {self.high:.3f}]"),
        ]
