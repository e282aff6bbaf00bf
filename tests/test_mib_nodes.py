"""MIB's metrics at node level: a planted circuit's curve by hand, the run against plain hooks on a normed family,
exact node scores against one patch per node, EAP's node scores against a finite difference."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from mathcircuits.circuit import (
    EdgeScores,
    NodeScores,
    Sender,
    copy_pairs,
    graph_edges,
    mib_node_scores,
    mib_scores,
    node_scores,
    plant_two_step,
)
from mathcircuits.circuit.mib import area_under
from mathcircuits.circuit.mib_nodes import graph_nodes_of
from mathcircuits.circuit.mib_result import MIB_PERCENTAGES
from mathcircuits.models import hooks, load_model
from mathcircuits.models.tiny import TINY_FAMILIES
from mathcircuits.stats import Uncertainty

from helpers import FAST_FAMILIES, tiered

MOVER, READER = Sender("head", 0, 1), Sender("head", 2, 2)


@pytest.fixture(scope="module")
def planted():
    model = load_model("tiny-llama")
    plant_two_step(model)
    return model, copy_pairs(model.tokenizer, 16, 1)


@pytest.fixture(scope="module")
def gemma3():
    model = load_model("tiny-gemma3")  # attention's output is normalised before the residual add
    return model, copy_pairs(model.tokenizer, 8, 2)


def _planted_scores(model, first: bool) -> NodeScores:
    nodes = graph_nodes_of(model.spec)
    top = 1.0 if first else -1.0
    return NodeScores(model.spec, nodes, tuple(top if s in (MOVER, READER) else 0.0 for s in nodes), "exact", 0.0)


def _patched_metric(model, pairs, dropped: set[Sender], scale: dict[Sender, float] | None = None) -> float:
    """Mean logit difference (answer vs counterfactual answer, last prompt token) with the dropped nodes' outputs
    taken from the counterfactual run, by plain hooks on the full forward (no circuit machinery); ``scale`` instead
    moves a node's output by that fraction of the way to the counterfactual's."""
    names = [n for layer in range(model.spec.n_layers) for n in (hooks.z(layer), hooks.mlp_out(layer))]
    moves = {s: 1.0 for s in dropped} | (scale or {})

    def patch(t, hook, cache):
        t = t.clone()
        for s, w in moves.items():
            if s.kind == "head" and hook.name == hooks.z(s.layer):
                t[:, :, s.head] += w * (cache[hook.name][:, :, s.head] - t[:, :, s.head])
            if s.kind == "mlp" and hook.name == hooks.mlp_out(s.layer):
                t += w * (cache[hook.name] - t)
        return t

    out = []
    for row in pairs.dataset:
        toks, cf = torch.tensor([row["tokens"]]), torch.tensor([row["cf_tokens"]])
        _, cache = model.bridge.run_with_cache(cf, names_filter=lambda n: n in names)
        with torch.no_grad():
            fwd = [(n, partial(patch, cache=cache)) for n in names]
            logits = model.bridge.run_with_hooks(toks, fwd_hooks=fwd)[0, -1].double()
        out.append(float(logits[row["answer_tokens"][0]] - logits[row["cf_answer_tokens"][0]]))
    return sum(out) / len(out)


def test_planted_node_curve_by_hand(planted):
    model, pairs = planted
    good = mib_node_scores(model, pairs, _planted_scores(model, True), uncertainty=Uncertainty(n_boot=200))
    # 15 nodes (3 layers × 4 heads + 1 MLP): int(p · 15) = 0 × 6, 1, 3, 7, 15; the mover and reader are in from 3
    assert good.level == "node" and good.n_edges == 15
    assert good.kept_signed == (0, 0, 0, 0, 0, 0, 1, 3, 7, 15)
    f = [iv.value for iv in good.faithfulness_signed]
    assert f[:6] == pytest.approx([0.0] * 6, abs=1e-9)  # the empty circuit is the counterfactual run
    assert abs(f[6]) < 0.1  # the reader alone: the marker holds the counterfactual's digit
    assert f[7:] == pytest.approx([1.0] * 3, abs=0.02)  # the other heads and MLPs write only noise
    # by hand from f = 0 up to 10 %, 1 from 20 %: CPR = (0.2 − 0.1)/2 + 0.3 + 0.5 = 0.85; CMD = 0.099 + 0.05
    assert good.cpr.value == pytest.approx(0.85, abs=0.02)
    assert good.cmd.value == pytest.approx(0.149, abs=0.02)
    assert good.cpr.value == pytest.approx(float(area_under(MIB_PERCENTAGES, torch.tensor(f))), abs=1e-6)
    assert good.cpr.low <= good.cpr.value <= good.cpr.high
    bad = mib_node_scores(model, pairs, _planted_scores(model, False), uncertainty=None)
    assert bad.cpr.value == pytest.approx(0.25, abs=0.02)  # whole only at 100 %: 0.5 · 0.5
    assert bad.cmd.value == pytest.approx(good.cmd.value, abs=1e-9)  # |score| puts the plant first again
    assert good.level == "node" and "nodes" in good.to_dataframe().columns


@pytest.mark.slow
def test_node_run_matches_plain_hooks_on_a_normed_family(gemma3):
    model, pairs = gemma3
    nodes = graph_nodes_of(model.spec)
    scores = NodeScores(model.spec, nodes, tuple(float(i) for i in range(len(nodes))[::-1]), "exact", 0.0)
    res = mib_node_scores(model, pairs, scores, percentages=(0.3, 1.0), uncertainty=None)
    kept = set(nodes[: int(0.3 * len(nodes))])
    m_c = _patched_metric(model, pairs, set(nodes) - kept)
    m_0, m_n = _patched_metric(model, pairs, set(nodes)), _patched_metric(model, pairs, set())
    assert res.clean == pytest.approx(m_n, abs=1e-4)
    assert res.counterfactual == pytest.approx(m_0, abs=1e-4)
    assert res.faithfulness_signed[0].value == pytest.approx((m_c - m_0) / (m_n - m_0), abs=1e-4)
    edges = graph_edges(model.spec, parallel=False)
    with pytest.raises(ValueError, match="not additive.*mib_node_scores"):
        mib_scores(
            model, pairs, EdgeScores(model.spec, False, edges, (0.0,) * len(edges), "random", 0.0), uncertainty=None
        )


def test_exact_node_scores_are_one_patch_per_node(gemma3):
    model, pairs = gemma3
    exact = node_scores(model, pairs, "exact")
    m_n = _patched_metric(model, pairs, set())
    for s in (exact.nodes[0], Sender("mlp", 0), exact.nodes[-1]):  # a layer-0 head, the first and the last MLP
        i = exact.nodes.index(s)
        assert exact.scores[i] == pytest.approx(-(_patched_metric(model, pairs, {s}) - m_n), abs=1e-4)


def test_eap_node_scores_are_the_first_order_effect(gemma3):
    model, pairs = gemma3
    eap = node_scores(model, pairs, "eap")
    eps = 0.01
    for i in (1, len(eap.nodes) - 2):  # a layer-0 head (its change passes every later norm), a last-layer head
        s = eap.nodes[i]
        up, down = (_patched_metric(model, pairs, set(), {s: w}) for w in (eps, -eps))
        slope = (up - down) / (2 * eps)  # d m / d(fraction of the way to the counterfactual's output), central
        assert abs(slope) > 1e-3  # the check can fail: the node matters
        assert eap.scores[i] == pytest.approx(-slope, rel=0.05, abs=1e-4)
    ig = node_scores(model, pairs, "eap-ig", steps=3)
    assert ig.method == "eap-ig" and len(ig) == len(eap)
    rnd = node_scores(model, pairs, "random", seed=1)
    assert rnd.scores == node_scores(model, pairs, "random", seed=1).scores != eap.scores


def test_bad_node_scores_are_refused(planted, gemma3):
    model, _ = planted
    nodes = graph_nodes_of(model.spec)
    with pytest.raises(ValueError, match="graph_nodes_of"):
        NodeScores(model.spec, nodes[::-1], (0.0,) * len(nodes), "exact", 0.0)
    with pytest.raises(ValueError, match="one finite score per node"):
        NodeScores(model.spec, nodes, (float("nan"),) * len(nodes), "exact", 0.0)
    with pytest.raises(ValueError):
        mib_node_scores(gemma3[0], gemma3[1], _planted_scores(model, True), uncertainty=None)  # another model's scores


@pytest.mark.parametrize("family", tiered(sorted(TINY_FAMILIES), FAST_FAMILIES))
def test_node_scores_on_every_family_equal_plain_hooks(family):
    """Exact node scores are one patch by plain hooks, and EAP's the central difference, on every tiny family."""
    model = load_model("tiny-" + family.replace("_", "-"))
    pairs = copy_pairs(model.tokenizer, 4, 2)
    exact, eap = node_scores(model, pairs, "exact"), node_scores(model, pairs, "eap")
    m_n, eps = _patched_metric(model, pairs, set()), 0.01
    last_mlp = exact.nodes.index(Sender("mlp", model.spec.n_layers - 1))
    assert exact.scores[last_mlp] == pytest.approx(
        -(_patched_metric(model, pairs, {exact.nodes[last_mlp]}) - m_n), abs=1e-4
    )
    s = eap.nodes[1]  # a layer-0 head: its change passes every later block
    up, down = (_patched_metric(model, pairs, set(), {s: w}) for w in (eps, -eps))
    assert eap.scores[1] == pytest.approx(-(up - down) / (2 * eps), rel=0.05, abs=1e-4)
