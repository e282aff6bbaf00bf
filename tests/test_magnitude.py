"""Attribution ranked by each pair's |effect|: the definition, and a planted head whose effect changes sign by pair."""

from __future__ import annotations

import pytest
import torch

from mathcircuits.circuit import INPUT, Receiver, Sender, copy_pairs, eap_scores, graph_edges, mib_scores
from mathcircuits.circuit.mib import paired_difference
from mathcircuits.circuit.mib_nodes import graph_nodes_of, node_scores
from mathcircuits.circuit.planted import PARITY, plant_copy
from mathcircuits.models import load_model
from mathcircuits.stats import Uncertainty

#: the parity head's path: the digit into its values, its output into the answer
PARITY_PATH = {(INPUT, Receiver("v", 1, group=0)), (Sender("head", *PARITY[0]), Receiver("logits"))}


@pytest.fixture(scope="module")
def parity():
    """The copy circuit beside a head that pushes an even digit up and an odd one down. Scoring pairs: four of two
    even digits and four of two odd ones (the head's effect is +12 and −12 of the logit difference: mean 0);
    evaluation pairs: sixteen of two even digits (the head helps in every one)."""
    model = load_model("tiny-llama")
    plant_copy(model, parity=PARITY)
    pairs = copy_pairs(model.tokenizer, 80, seed=1)
    digit = {model.tokenizer.convert_tokens_to_ids(str(d)): d for d in range(10)}
    kind = [(digit[a[0]] % 2, digit[b[0]] % 2) for a, b in zip(pairs.answer_tokens, pairs.cf_answer_tokens)]
    even = [i for i, k in enumerate(kind) if k == (0, 0)]
    odd = [i for i, k in enumerate(kind) if k == (1, 1)]
    return model, pairs, pairs.select(even[:4] + odd[:4]), pairs.select(even[4:20])


def test_magnitude_is_the_mean_of_each_pairs_size_of_effect(parity):
    model, pairs, score, _ = parity
    four = score.select([0, 1, 4, 5])
    got = torch.tensor(eap_scores(model, four, "eap", aggregate="magnitude").scores)
    alone = torch.stack([torch.tensor(eap_scores(model, four.select([i]), "eap").scores) for i in range(4)])
    assert got.min() >= 0
    torch.testing.assert_close(got, alone.abs().mean(0), rtol=1e-5, atol=1e-6)
    one = eap_scores(model, four.select([0]), "eap-ig", aggregate="magnitude")
    assert one.method == "eap-ig-magnitude"
    torch.testing.assert_close(
        torch.tensor(one.scores), alone.new_tensor(eap_scores(model, four.select([0])).scores).abs()
    )


@pytest.mark.slow  # four attribution rankings and eight MIB evaluations on the tiny model (about 15 CPU-s)
def test_magnitude_keeps_a_head_whose_effects_cancel_across_the_scoring_pairs(parity):
    model, _, score, evaluate = parity
    edges = graph_edges(model.spec, False)
    at = {e: edges.index(e) for e in PARITY_PATH}
    n = 7  # the copy path, the parity path and two more: MIB's int(p · |E|) = 7
    grid = ((n + 0.5) / len(edges), 1.0)
    boot = Uncertainty(n_boot=200)
    for method in ("eap", "eap-ig"):
        mean = eap_scores(model, score, method, metric="logit_diff")
        size = eap_scores(model, score, method, metric="logit_diff", aggregate="magnitude")
        head = at[(Sender("head", *PARITY[0]), Receiver("logits"))]
        assert abs(mean.scores[head]) < 0.05 * size.scores[head]  # the pairs' ±12 cancel in the mean
        assert head not in mean.ranking(absolute=True)[:10]
        assert set(at.values()) <= set(size.ranking(absolute=True)[:n])  # each pair's size keeps the whole path
        f = {
            k: mib_scores(model, evaluate, s, percentages=grid, uncertainty=boot)
            for k, s in (("mean", mean), ("size", size))
        }
        assert abs(1 - f["size"].faithfulness_absolute[0].value) < 0.05  # pairs where the head helps: kept
        assert f["mean"].faithfulness_absolute[0].high < 0.95  # dropped: the answer's margin falls short
        diff, _ = paired_difference(f["size"], f["mean"], boot)
        assert diff.high < 0


def test_node_magnitude_ranks_the_parity_head_that_the_mean_cancels(parity):
    model, _, score, _ = parity
    node_index = graph_nodes_of(model.spec).index(Sender("head", *PARITY[0]))
    for method in ("exact", "eap-ig"):
        mean = node_scores(model, score, method)
        size = node_scores(model, score, method, aggregate="magnitude")
        assert size.method == f"{method}-magnitude" and min(size.scores) >= 0
        assert abs(mean.scores[node_index]) < 0.2 * size.scores[node_index]  # exact: the norm bends ±12 a little
        assert node_index in size.ranking(absolute=True)[:3] and node_index not in mean.ranking(absolute=True)[:3]
    with pytest.raises(ValueError, match="no effects to aggregate"):
        node_scores(model, score, "random", aggregate="magnitude")
