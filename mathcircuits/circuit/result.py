"""The value circuit discovery returns: a :class:`Circuit` of nodes and edges.

A node is a component (``L14.H2``, ``MLP3``) at a position labelled by role (``A``, ``B``, ``op``,
``last``), offset from the end of the prompt (``-3``) or answer place (``ans1``: the position holding the
answer's first token); ``logits`` is the sink. An edge's ``via`` is the receiver input it enters; a k/v
edge on a GQA model enters a KV group, read by the query heads in ``shared_by``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
from torch import nn

from mathcircuits._errors import FixableKeyError, FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits.circuit.config import EdgeSender, MLPMode, ReceiverKind, ScanPositions
from mathcircuits.models import Head, HookedModel
from mathcircuits.models.spec import ModelSpec, check_model

__all__ = ["Circuit", "CircuitData", "CircuitSettings", "DiscoveryRound", "Edge", "Node"]


@dataclass(frozen=True)
class Node:
    """A component at a position.

    ``depth``: 1 for the senders to the logits (0 for key heads given by hand), 2 for their senders, ...;
    ``role``: a short reading of what it does (e.g. ``operand mover``).
    """

    kind: str
    layer: int
    head: int
    position: str
    depth: int = 0
    role: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("head", "mlp", "logits"):
            raise FixableValueError(f"circuit node kind {self.kind!r} is unknown. ", "use 'head', 'mlp' or 'logits'.")

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
    """A sender → receiver effect, averaged over pairs under the circuit's metric, with its bootstrap interval."""

    sender: str
    receiver: str
    via: str
    effect: float
    low: float
    high: float
    shared_by: tuple[int, ...] = ()


@dataclass(frozen=True)
class CircuitData:
    """The pairs a circuit was found on (operations, templates, pair ids), and the pairs kept for its evaluation."""

    operations: list[str] = field(default_factory=list)
    templates: list[str] = field(default_factory=list)
    pair_ids: list[int] = field(default_factory=list)
    eval_pair_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class DiscoveryRound:
    """One round of discovery: the circuit's size after it, its faithfulness on the discovery pairs, the time so far."""

    round: int
    nodes: int
    edges: int
    faithfulness: float
    seconds: float


@dataclass(frozen=True)
class CircuitSettings:
    """How a circuit was found (the arguments of :func:`~mathcircuits.circuit.discover_circuit`), its rounds and why
    it stopped."""

    key_heads: list[Head] | None = None
    depth: int = 2
    threshold: float = 0.0
    top_k: int = 0
    logits_top_k: int = 0
    senders: list[EdgeSender] = field(default_factory=list)
    receivers: list[ReceiverKind] = field(default_factory=list)
    positions: ScanPositions = "roles"
    screen: int | None = None
    saturation_tol: float | None = None
    mlps: MLPMode = "ablate"
    max_nodes: int | None = None
    max_seconds: float | None = None
    batch_size: int = 16
    n_boot: int = 0
    seed: int = 0
    rounds: list[DiscoveryRound] = field(default_factory=list)
    stopped: str = ""


@dataclass(frozen=True, repr=False)
class Circuit(SavedResult):
    """Nodes and edges found by iterating sender → receiver path patching from the key components."""

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
                raise FixableValueError(
                    f"circuit node {n.name}: layer {n.layer} is outside {spec.describe()} "
                    f"(layers 0..{spec.n_layers - 1}). ",
                    "name existing components.",
                )
        names = {n.name for n in self.nodes}
        dangling = [e for e in self.edges if e.sender not in names or e.receiver not in names]
        if dangling:
            e = dangling[0]
            raise FixableValueError(
                f"edge {e.sender} → {e.receiver} names a node the circuit does not have. ",
                "build circuits with discover_circuit(), or list both nodes.",
            )

    def check_model(self, model: ModelSpec | HookedModel | nn.Module) -> None:
        """Refuse a model other than the one the circuit was found on."""
        check_model(self.model, model, "this circuit", "discover the circuit on this model")

    @property
    def heads(self) -> list[Head]:
        """The circuit's attention heads (any position), sorted."""
        return sorted({Head(n.layer, n.head) for n in self.nodes if n.kind == "head"})

    def node(self, name: str) -> Node:
        """The node of a name; a clear error for an unknown one."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise FixableKeyError(f"the circuit has no node {name!r}. ", f"use one of {[n.name for n in self.nodes]}.")

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
