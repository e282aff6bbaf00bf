"""EAP-IG / MIB graph files: edge scores and circuits in the field's JSON, read and written on our graph.

The format is EAP-IG's ``Graph.to_json`` / ``from_json`` (``hannamw/EAP-IG``, ``src/eap/graph.py``), which
MIB's circuit track reads::

    {"cfg": {"n_layers": 30, "n_heads": 9, "parallel_attn_mlp": false, "d_model": 576, ...},
     "nodes": {"input": {"in_graph": true}, "a0.h0": {...}, "m0": {...}, ..., "logits": {...}},
     "edges": {"input->a0.h0<q>": {"score": 0.12, "in_graph": true}, "a0.h0->m0": {...}, "m29->logits": {...}}}

Edges are ``parent->child``, with ``<q>``/``<k>``/``<v>`` when the child is a head; missing edges read as
score 0, outside the circuit (as their loader).

**Grouped KV heads.** EAP-IG gives every query head its own key and value input; our graph keeps one per
KV group. Writing, a group's edge becomes one edge per query head with ``score / group_size`` and the
group's ``in_graph``; reading, a group's score is the sum over its heads (to first order, their
attributions add) and it is in the circuit when any head's edge is (the union;
:attr:`GraphFile.split_groups` counts files that split a group). A round trip is exact.

Usage::

    write_graph(scores, "eap.json", circuit=top_edges)
    read = read_graph("their_circuit.json", model.spec, parallel=False)
    read.scores, read.circuit
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from mathcircuits._errors import FixableValueError
from mathcircuits._files import read_json, write_json
from mathcircuits.circuit.components import Receiver, Sender
from mathcircuits.circuit.edge_scores import INPUT, EdgeKey, EdgeScores, graph_edges
from mathcircuits.models.spec import ModelSpec

__all__ = ["GraphFile", "read_graph", "write_graph"]

_EDGE = re.compile(r"^(input|a(\d+)\.h(\d+)|m(\d+))->(a(\d+)\.h(\d+)<([qkv])>|m(\d+)|logits)$")


def _sender_name(s: Sender) -> str:
    return "input" if s.kind == "input" else (f"a{s.layer}.h{s.head}" if s.kind == "head" else f"m{s.layer}")


def _child_names(r: Receiver, group_size: int) -> list[str]:
    if r.kind == "logits":
        return ["logits"]
    if r.kind == "mlp":
        return [f"m{r.layer}"]
    heads = [r.head] if r.kind == "q" else range(r.group * group_size, (r.group + 1) * group_size)
    return [f"a{r.layer}.h{h}<{r.kind}>" for h in heads]


@dataclass(frozen=True)
class GraphFile:
    """A graph file read onto our graph: the edge scores, the circuit's edges, and the KV groups read as a union.

    ``scores`` have method ``"imported"``; ``split_groups``: KV-group edges whose file kept some query heads'
    key/value edge but not all.
    """

    scores: EdgeScores
    circuit: frozenset[EdgeKey]
    split_groups: int = 0


def write_graph(
    scores: EdgeScores, path: str | os.PathLike, circuit: Collection[EdgeKey] = (), d_model: int | None = None
) -> Path:
    """Write edge scores (and a circuit: its edges' ``in_graph``) as an EAP-IG / MIB graph JSON file."""
    spec = scores.model
    unknown = [e for e in circuit if e not in set(scores.edges)]
    if unknown:
        s, r = unknown[0]
        raise FixableValueError(
            f"circuit edge {s.name} → {r.name} is not scored. ", "take circuit edges from scores.edges."
        )
    g = spec.group_size
    kept = set(circuit)
    edges: dict[str, dict[str, float | bool]] = {}
    out_nodes, in_nodes = {"logits"}, {"input"}
    for (s, r), x in zip(scores.edges, scores.scores):
        children = _child_names(r, g)
        for child in children:
            edges[f"{_sender_name(s)}->{child}"] = {"score": x / len(children), "in_graph": (s, r) in kept}
            if (s, r) in kept:
                out_nodes.add(_sender_name(s))
                in_nodes.add(child.split("<")[0])
    nodes = ["input"]
    for layer in range(spec.n_layers):
        nodes += [f"a{layer}.h{h}" for h in range(spec.n_heads)] + [f"m{layer}"]
    cfg = {
        "n_layers": spec.n_layers,
        "n_heads": spec.n_heads,
        "parallel_attn_mlp": scores.parallel,
        "d_model": spec.d_model if d_model is None else d_model,
        "n_key_value_heads": spec.n_kv_heads,
    }
    node_dict = {n: {"in_graph": n in out_nodes and n in in_nodes} for n in nodes}
    node_dict["logits"] = {"in_graph": True}
    return write_json(path, {"cfg": cfg, "nodes": node_dict, "edges": edges})


def _parse(name: str, spec: ModelSpec, source: str) -> tuple[Sender, Receiver, int]:
    """``(sender, resolved receiver, query head or -1)`` of one edge name."""
    m = _EDGE.match(name)
    if m is None:
        raise FixableValueError(
            f"{source}: edge {name!r} is not an EAP-IG edge name (parent->child, <q>/<k>/<v> into a head). ",
            "name edges like 'input->a0.h1<q>', 'a0.h1->m3', 'm3->logits'.",
        )
    if m.group(1) == "input":
        s = INPUT
    elif m.group(2) is not None:
        s = Sender("head", int(m.group(2)), int(m.group(3)))
    else:
        s = Sender("mlp", int(m.group(4)))
    s.check(spec)
    if m.group(5) == "logits":
        return s, Receiver("logits"), -1
    if m.group(9) is not None:
        return s, Receiver("mlp", int(m.group(9))).check(spec), -1
    layer, head, kind = int(m.group(6)), int(m.group(7)), m.group(8)
    spec.check_head(layer, head)
    if kind == "q":
        return s, Receiver("q", layer, head=head), head
    return s, Receiver(kind, layer, group=head // spec.group_size), head


def read_graph(path: str | os.PathLike, spec: ModelSpec, parallel: bool) -> GraphFile:
    """Read an EAP-IG / MIB graph JSON file onto our graph (see the module docstring for grouped KV heads).

    ``spec`` and ``parallel`` must match the file's ``cfg`` (layers, heads, ``parallel_attn_mlp``).
    """
    source = str(path)
    d = read_json(path)
    missing = [k for k in ("cfg", "nodes", "edges") if not isinstance(d, dict) or k not in d]
    if missing:
        raise FixableValueError(f"{source} lacks {missing}. ", "give a graph file written by EAP-IG's Graph.to_json.")
    cfg = d["cfg"]
    theirs = (cfg.get("n_layers"), cfg.get("n_heads"), bool(cfg.get("parallel_attn_mlp", False)))
    if theirs != (spec.n_layers, spec.n_heads, parallel):
        raise FixableValueError(
            f"{source} describes a model of {theirs[0]} layers, {theirs[1]} heads, parallel={theirs[2]}; the model "
            f"is {spec.describe()} (parallel={parallel}). ",
            "read the file made on this model.",
        )
    score: dict[EdgeKey, float] = defaultdict(float)
    heads_in: dict[EdgeKey, set[int]] = defaultdict(set)
    for name, info in d["edges"].items():
        s, r, head = _parse(name, spec, source)
        if not r.is_downstream_of(s, parallel):
            raise FixableValueError(f"{source}: edge {name!r} goes backwards. ", "an edge runs from an earlier layer.")
        x = float(info.get("score", 0.0) if isinstance(info, dict) else 0.0)
        score[(s, r)] += 0.0 if math.isnan(x) else x
        if isinstance(info, dict) and info.get("in_graph", False):
            heads_in[(s, r)].add(head)
    edges = graph_edges(spec, parallel)
    circuit = frozenset(heads_in)
    split = sum(1 for (_, r), hs in heads_in.items() if r.kind in ("k", "v") and len(hs) < spec.group_size)
    scores = EdgeScores(spec, parallel, edges, tuple(score.get(e, 0.0) for e in edges), "imported", 0.0, "unknown")
    return GraphFile(scores, circuit, split)
