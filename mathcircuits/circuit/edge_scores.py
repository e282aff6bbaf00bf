"""One signed score per edge of the model's whole edge graph: :class:`EdgeScores`, the record every scorer returns.

The graph is MIB's (Mueller et al. 2025; Hanna et al. 2024's EAP-IG ``Graph``), on our components:

* senders: the token embeddings (:data:`INPUT`), every head, every MLP;
* receivers: each query head's ``q``; each **KV group's** ``k`` and ``v`` (GQA kept grouped); each MLP's
  input; the logits;
* an edge joins a sender to every receiver it can reach (an earlier layer; in a sequential block a
  layer's heads reach its own MLP).

Edges are position-free, as in MIB: kept or patched at every position. Scores are signed (higher: more
of the behaviour); method and time travel with them (:func:`~mathcircuits.circuit.mib_scores`).

Usage::

    edges = graph_edges(model.spec, parallel=False)                 # the whole graph, in a fixed order
    scores = EdgeScores(model.spec, False, edges, tuple(values), "eap", seconds=12.0)
    scores.top(10)                                                   # the 10 highest signed scores
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, TypeAlias, get_args

from mathcircuits._errors import FixableKeyError, FixableValueError
from mathcircuits.circuit.components import Receiver, Sender, upstream_senders
from mathcircuits.models.spec import ModelSpec

__all__ = [
    "INPUT",
    "EdgeScores",
    "ScoreMethod",
    "graph_edges",
]

#: How the scores were made: exact sender → receiver patching, attribution patching, its integrated-gradient form,
#: either ranked by the size of each pair's effect (``-magnitude``: :func:`~.eap.eap_scores`), random draws, read
#: from another tool's graph file, the order of a search on whole circuits (:mod:`.search`), or learned edge masks
#: (:mod:`.masks`).
ScoreMethod: TypeAlias = Literal[
    "exact", "eap", "eap-ig", "eap-magnitude", "eap-ig-magnitude", "random", "imported", "search", "edge-masks"
]
SCORE_METHODS: tuple[str, ...] = get_args(ScoreMethod)
#: The token embeddings as a sender.
INPUT = Sender("input", -1)
#: An edge of the graph: a sender and a resolved, position-free receiver.
EdgeKey: TypeAlias = tuple[Sender, Receiver]


def _receivers(spec: ModelSpec) -> list[Receiver]:
    out: list[Receiver] = []
    for layer in range(spec.n_layers):
        out += [Receiver("q", layer, head=h) for h in range(spec.n_heads)]
        out += [Receiver(kind, layer, group=g) for kind in ("k", "v") for g in range(spec.n_kv_heads)]
        out.append(Receiver("mlp", layer))
    return [*out, Receiver("logits")]


def graph_edges(spec: ModelSpec, parallel: bool) -> tuple[EdgeKey, ...]:
    """Every edge of the graph, receiver by receiver in layer order; the input first among each receiver's senders."""
    return tuple((s, r) for r in _receivers(spec) for s in [INPUT, *upstream_senders(spec, r, parallel)])


@dataclass(frozen=True, repr=False)
class EdgeScores:
    """A signed score for each edge of a model's graph, the method that made them and its time.

    ``parallel`` decides which MLP edges exist; each edge appears once; ``seconds`` is wall clock;
    ``metric`` what the scores measure (e.g. ``"answer_logprob"``); ``pair_keys``: fingerprints of the pairs that made
    them (:func:`~mathcircuits.data.pairset.pair_keys`; empty for imported or random scores), so an evaluation on
    those pairs warns of selection bias. ``parts``: when methods share the ranking,
    which ordered which stretch of it, top first, by ``|score|`` (``(("exact", 49), ("eap-ig", 70602))``; empty:
    ``method`` ordered it all).
    """

    model: ModelSpec
    parallel: bool
    edges: tuple[EdgeKey, ...]
    scores: tuple[float, ...]
    method: ScoreMethod
    seconds: float
    metric: str = "logit_diff"
    pair_keys: tuple[str, ...] = ()
    parts: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.method not in SCORE_METHODS:
            raise FixableValueError(
                f"edge-score method {self.method!r} is unknown. ", f"use one of {list(SCORE_METHODS)}."
            )
        if len(self.edges) != len(self.scores):
            raise FixableValueError(
                f"{len(self.edges)} edges but {len(self.scores)} scores. ", "give one score per edge, in edge order."
            )
        if len(set(self.edges)) != len(self.edges):
            raise FixableValueError("an edge is scored twice. ", "list each (sender, receiver) once.")
        bad = [(s, r) for s, r in self.edges if r.check(self.model) != r or not r.is_downstream_of(s, self.parallel)]
        if bad:
            s, r = bad[0]
            raise FixableValueError(
                f"edge {s.name} → {r.name} is not an edge of {self.model.describe()}: the receiver must be resolved "
                "(q: a head; k/v: a KV group; no position) and downstream of the sender. ",
                "take edges from graph_edges(spec, parallel).",
            )
        if self.parts and sum(n for _, n in self.parts) != len(self.edges):
            raise FixableValueError(
                f"parts {self.parts} cover {sum(n for _, n in self.parts)} of {len(self.edges)} edges. ",
                "name the method of every stretch of the ranking.",
            )
        nan = [i for i, x in enumerate(self.scores) if math.isnan(x)]
        if nan:
            s, r = self.edges[nan[0]]
            raise FixableValueError(f"edge {s.name} → {r.name} has a NaN score. ", "score every edge (0 for none).")

    def __len__(self) -> int:
        return len(self.edges)

    def __repr__(self) -> str:
        return (
            f"EdgeScores({self.method}, {self.model.name}, {len(self.edges)} edges, metric={self.metric}, "
            f"{self.seconds:.1f} s)"
        )

    @property
    def is_whole_graph(self) -> bool:
        """Whether every edge of the model's graph is scored."""
        return set(self.edges) == set(graph_edges(self.model, self.parallel))

    def score(self, sender: Sender, receiver: Receiver) -> float:
        """The score of one edge; a clear error for an edge not scored."""
        for (s, r), x in zip(self.edges, self.scores):
            if s == sender and r == receiver:
                return x
        raise FixableKeyError(f"edge {sender.name} → {receiver.name} is not scored. ", "use an edge of .edges.")

    def ranking(self, absolute: bool) -> list[int]:
        """Edge indices, highest score first (``absolute``: by ``|score|``); ties keep edge order."""
        key = [abs(x) if absolute else x for x in self.scores]
        return sorted(range(len(key)), key=lambda i: -key[i])

    def top(self, n: int, absolute: bool = False) -> list[tuple[EdgeKey, float]]:
        """The ``n`` highest-ranked edges with their scores."""
        return [(self.edges[i], self.scores[i]) for i in self.ranking(absolute)[:n]]

    def per_edge_seconds(self) -> float:
        """Seconds per scored edge."""
        return self.seconds / max(1, len(self.edges))
