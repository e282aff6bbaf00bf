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

**Read for content.** A file is checked before any of it is used: ``cfg``, ``nodes``, ``edges`` and each edge's
record are objects, ``in_graph`` a JSON boolean (``"false"`` is refused: as text it is true), ``score`` a finite
number, ``cfg``'s shape (layers, heads, KV heads, ``parallel_attn_mlp``) the model's. The model a file was written
for is recorded under ``"mathcircuits"`` (its name and a fingerprint of its :class:`ModelSpec`), a top-level key
EAP-IG's ``Graph.from_json`` does not read, so the file stays loadable there; reading checks it, so a graph of
another model of the same shape is refused. Files without it (EAP-IG's own) are checked by shape alone.

Usage::

    write_graph(scores, "eap.json", circuit=top_edges)
    read = read_graph("their_circuit.json", model.spec, parallel=False)
    read.scores, read.circuit
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from mathcircuits._errors import FixableValueError, problem_of
from mathcircuits._files import read_json, write_json
from mathcircuits.circuit.components import Receiver, Sender
from mathcircuits.circuit.edge_scores import INPUT, EdgeKey, EdgeScores, graph_edges
from mathcircuits.models.spec import ModelMismatchError, ModelSpec

__all__ = ["GraphFile", "read_graph", "write_graph"]

#: The top-level key of our own record in a graph file (EAP-IG's loader reads only cfg, nodes and edges).
MODEL_KEY = "mathcircuits"
_FIX = "give a graph file written by EAP-IG's Graph.to_json or by write_graph"

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
    scores: EdgeScores,
    path: str | os.PathLike,
    circuit: Collection[EdgeKey] = (),
    d_model: int | None = None,
    faithfulness: float | None = None,
) -> Path:
    """Write edge scores (and a circuit: its edges' ``in_graph``) as an EAP-IG / MIB graph JSON file.

    The ``"mathcircuits"`` record carries the model's name and fingerprint, the scores' method and ``parts``, and
    ``faithfulness`` when given (the circuit's ``f``, e.g. measured exactly on the pairs that chose it).
    """
    spec = scores.model
    scored = set(scores.edges)
    unknown = [e for e in circuit if e not in scored]
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
    record: dict[str, object] = {"model": spec.name, "spec_fingerprint": _fingerprint(spec), "method": scores.method}
    if scores.parts:
        record["parts"] = [list(p) for p in scores.parts]
    if faithfulness is not None:
        record["faithfulness"] = faithfulness
    return write_json(path, {"cfg": cfg, "nodes": node_dict, "edges": edges, MODEL_KEY: record})


def _fingerprint(spec: ModelSpec) -> str:
    """A short hash of a model's identity facts (all of its spec but ``source``: one model loaded from two places
    is the same model)."""
    facts = {k: v for k, v in spec.to_dict().items() if k != "source"}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


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
    try:
        s.check(spec)
    except (IndexError, ValueError) as err:
        raise FixableValueError(
            f"{source}: edge {name!r}: {problem_of(err)}. ", "read the file made on this model."
        ) from None
    if m.group(5) == "logits":
        return s, Receiver("logits"), -1
    layer, head, kind = (int(m.group(9)), -1, "mlp") if m.group(9) is not None else (
        int(m.group(6)), int(m.group(7)), m.group(8))  # fmt: skip
    try:
        if kind == "mlp":
            return s, Receiver("mlp", layer).check(spec), -1
        spec.check_head(layer, head)
    except (IndexError, ValueError) as err:
        raise FixableValueError(
            f"{source}: edge {name!r}: {problem_of(err)}. ", "read the file made on this model."
        ) from None
    if kind == "q":
        return s, Receiver("q", layer, head=head), head
    return s, Receiver(kind, layer, group=head // spec.group_size), head


def _kind(value: object) -> str:
    """A JSON value's type in JSON's words, for messages."""
    names = {dict: "an object", list: "a list", str: "text", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _integer(cfg: dict, key: str, source: str) -> int | None:
    value = cfg.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise FixableValueError(f"{source}: cfg.{key} is {_short(value)}, not a positive whole number. ", f"{_FIX}.")
    return value


def _short(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _boolean(value: object, where: str, source: str) -> bool:
    if not isinstance(value, bool):
        raise FixableValueError(
            f"{source}: {where} is {_short(value)} ({_kind(value)}), not a JSON boolean. ",
            'write true or false without quotes ("false" as text would count as true).',
        )
    return value


def _check_model(record: object, spec: ModelSpec, source: str) -> None:
    """Refuse a file whose recorded model (name and spec fingerprint) is not ``spec``'s."""
    if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("model", "spec_fingerprint")):
        raise FixableValueError(
            f"{source}: its {MODEL_KEY!r} record is {_short(record)}, not the model's name and fingerprint. ",
            f"remove the {MODEL_KEY!r} key (the file is then checked by shape alone), or write the file again.",
        )
    ours = _fingerprint(spec)
    if (record["model"], record["spec_fingerprint"]) != (spec.name, ours):
        raise ModelMismatchError(
            f"{source} was written for model {record['model']!r} (spec fingerprint {record['spec_fingerprint']}), "
            f"not for {spec.describe()} (fingerprint {ours}); its head and edge names would mean other "
            "components here. ",
            "read the file with the model it was written for, or score this model's edges.",
        )


def read_graph(path: str | os.PathLike, spec: ModelSpec, parallel: bool) -> GraphFile:
    """Read an EAP-IG / MIB graph JSON file onto our graph (see the module docstring for grouped KV heads).

    ``spec`` and ``parallel`` must match the file's ``cfg`` (layers, heads, KV heads, ``parallel_attn_mlp``) and the
    model the file records, if it records one. Every problem is a :class:`FixableValueError` (a
    :class:`ModelMismatchError` for another model) naming the file.
    """
    source = str(path)
    d = read_json(path)
    if not isinstance(d, dict):
        raise FixableValueError(f"{source} holds {_kind(d)}, not a graph object (cfg, nodes, edges). ", f"{_FIX}.")
    missing = [k for k in ("cfg", "nodes", "edges") if k not in d]
    if missing:
        raise FixableValueError(f"{source} lacks {missing}. ", f"{_FIX}.")
    for key in ("cfg", "nodes", "edges"):
        if not isinstance(d[key], dict):
            raise FixableValueError(f"{source}: {key} is {_kind(d[key])}, where an object belongs. ", f"{_FIX}.")
    cfg = d["cfg"]
    layers, heads = _integer(cfg, "n_layers", source), _integer(cfg, "n_heads", source)
    kv = _integer(cfg, "n_key_value_heads", source)
    par = _boolean(cfg.get("parallel_attn_mlp", False), "cfg.parallel_attn_mlp", source)
    theirs = (layers, heads, par)
    if theirs != (spec.n_layers, spec.n_heads, parallel) or (kv is not None and kv != spec.n_kv_heads):
        kv_text = "" if kv is None else f", {kv} key/value heads"
        raise FixableValueError(
            f"{source} describes a model of {theirs[0]} layers, {theirs[1]} heads{kv_text}, parallel={theirs[2]}; "
            f"the model is {spec.describe()} with {spec.n_kv_heads} key/value heads (parallel={parallel}). ",
            "read the file made on this model.",
        )
    if MODEL_KEY in d:
        _check_model(d[MODEL_KEY], spec, source)
    for name, info in d["nodes"].items():
        if not isinstance(info, dict):
            raise FixableValueError(f"{source}: node {name!r} is {_kind(info)}, where an object belongs. ", f"{_FIX}.")
        if "in_graph" in info:
            _boolean(info["in_graph"], f"node {name!r}'s in_graph", source)
    score: dict[EdgeKey, float] = defaultdict(float)
    heads_in: dict[EdgeKey, set[int]] = defaultdict(set)
    for name, info in d["edges"].items():
        s, r, head = _parse(name, spec, source)
        if not r.is_downstream_of(s, parallel):
            raise FixableValueError(f"{source}: edge {name!r} goes backwards. ", "an edge runs from an earlier layer.")
        if not isinstance(info, dict):
            raise FixableValueError(
                f'{source}: edge {name!r} is {_kind(info)}, where an object belongs ({{"score": ..., '
                '"in_graph": ...}). ',
                f"{_FIX}.",
            )
        x = info.get("score")
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise FixableValueError(
                f"{source}: edge {name!r} has score {_short(x)}, not a finite number. ",
                "give every edge a finite score (an unscored edge: leave it out, it reads as 0).",
            )
        score[(s, r)] += float(x)
        if _boolean(info.get("in_graph", False), f"edge {name!r}'s in_graph", source):
            heads_in[(s, r)].add(head)
    edges = graph_edges(spec, parallel)
    circuit = frozenset(heads_in)
    split = sum(1 for (_, r), hs in heads_in.items() if r.kind in ("k", "v") and len(hs) < spec.group_size)
    scores = EdgeScores(spec, parallel, edges, tuple(score.get(e, 0.0) for e in edges), "imported", 0.0, "unknown")
    return GraphFile(scores, circuit, split)
