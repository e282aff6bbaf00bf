"""TransformerLens 4.3's attribution on our graph, for ``bench_mib.py``: its edge and node scores mapped onto ours,
and what it says (runs or refuses) on a model. The answers' readout is MIB-style: the first differing answer token."""

from __future__ import annotations

import time

from mathcircuits.circuit import INPUT, EdgeScores, NodeScores, Receiver, Sender, circuit_batches, graph_edges
from mathcircuits.circuit.mib_nodes import graph_nodes_of
from mathcircuits.models.families import block_structure


def tl_edge_scores(model, tokens, cf_tokens, first, good, bad) -> EdgeScores:
    """TransformerLens' edge attribution of every pair (one call each: its metric reads one example), averaged,
    summed over positions and mapped onto our graph (its sign is already "higher: more of the behaviour")."""
    from transformer_lens.tools.analysis.attribution_patching import EdgeAttributionConfig, attribution_patch

    parallel = block_structure(model).parallel
    total: dict[tuple, float] = {}
    for i in range(tokens.shape[0]):

        def metric(logits, i=i):
            return logits[0, first[i], good[i]] - logits[0, first[i], bad[i]]

        res = attribution_patch(model.bridge, tokens[i : i + 1], cf_tokens[i : i + 1], metric,
                                EdgeAttributionConfig("edge"))  # fmt: skip
        for (w, r), x in res.edge_scores.items():
            key = (_tl_sender(w), _tl_receiver(r, model.spec.group_size))
            total[key] = total.get(key, 0.0) + x / tokens.shape[0]
    edges = graph_edges(model.spec, parallel)
    return EdgeScores(model.spec, parallel, edges, tuple(total.get(e, 0.0) for e in edges), "imported", 0.0)


def _tl_sender(node) -> Sender:
    if node.kind == "embed":
        return INPUT
    return Sender("head", node.layer, node.head) if node.kind == "attn_head_out" else Sender("mlp", node.layer)


def _tl_receiver(node, group_size: int) -> Receiver:
    if node.kind == "logits":
        return Receiver("logits")
    if node.kind == "mlp_in":
        return Receiver("mlp", node.layer)
    if node.kind == "q_input":
        return Receiver("q", node.layer, head=node.head)
    return Receiver(node.kind[0], node.layer, group=node.head // group_size)


def tl_node_scores(model, pairs) -> NodeScores:
    """TransformerLens' node attribution (``EdgeAttributionConfig("node")``: ``(a_clean − a_corrupt) · g``, the
    gradient on the counterfactual run) of every pair, averaged over pairs and summed over positions per head and
    MLP (its sign is already "higher: more of the behaviour"); its embedding nodes are left out, as in ours."""
    from transformer_lens.tools.analysis.attribution_patching import EdgeAttributionConfig, attribution_patch

    rows = answers_of(pairs, model)
    total: dict[Sender, float] = {}
    for tok, cf, first, good, bad in rows:

        def metric(logits, first=first, good=good, bad=bad):
            return logits[0, first, good] - logits[0, first, bad]

        res = attribution_patch(model.bridge, tok[None], cf[None], metric, EdgeAttributionConfig("node"))
        for node, x in res.node_scores.items():
            if node.kind != "embed":
                s = Sender("head", node.layer, node.head) if node.kind == "attn_head_out" else Sender("mlp", node.layer)
                total[s] = total.get(s, 0.0) + x / len(rows)
    nodes = graph_nodes_of(model.spec)
    return NodeScores(model.spec, nodes, tuple(total.get(s, 0.0) for s in nodes), "imported", 0.0)


def answers_of(pairs, model):
    """Teacher-forced tokens and, per pair, where and between which tokens MIB's logit difference is read."""
    rows = []
    for b in circuit_batches(model, pairs, "suffix", 64):
        for j, i in enumerate(b.idx):
            a, c = list(pairs.answer_tokens[i]), list(pairs.cf_answer_tokens[i])
            k = next(k for k, (x, y) in enumerate(zip(a, c)) if x != y)
            rows.append((b.tokens[j], b.cf_tokens[j], b.n_prompt - 1 + k, a[k], c[k]))
    return rows


def tl_on_model(model, pairs) -> dict:
    """TransformerLens' edge attribution on this model: ran (time) or refused (its message)."""
    rows = answers_of(pairs, model)[:1]
    tok, cf, first, good, bad = rows[0]
    try:
        t = time.perf_counter()
        tl_edge_scores(model, tok[None], cf[None], [first], [good], [bad])
        return {"ran": True, "seconds_one_pair": time.perf_counter() - t}
    except (ValueError, NotImplementedError) as err:
        return {"ran": False, "refusal": " ".join(str(err).split())[:600]}
