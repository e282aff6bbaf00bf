"""Learned edge masks: the soft run is the hard one at 0/1 weights, and the masks escape a single-edge trap."""

from __future__ import annotations

import pytest
import torch

from mathcircuits.circuit import (
    INPUT,
    EdgeScores,
    Receiver,
    Sender,
    copy_pairs,
    eap_scores,
    graph_edges,
    learn_edge_masks,
    mib_scores,
    paired_difference,
)
from mathcircuits.circuit.batches import circuit_batches
from mathcircuits.circuit.mib_metric import mib_readout
from mathcircuits.circuit.mib_run import edge_masks, masked_run, soft_masked_run
from mathcircuits.circuit.planted import CANCELLING, plant_copy
from mathcircuits.circuit.wiring import resample_values
from mathcircuits.models import load_model
from mathcircuits.stats import Uncertainty

#: the planted copy path: the digit into the mover's values, the mover into the reader's, the reader out
PATH = {
    (INPUT, Receiver("v", 0, group=0)),
    (Sender("head", 0, 1), Receiver("v", 2, group=1)),
    (Sender("head", 2, 2), Receiver("logits")),
}


def _planted(cancelling):
    model = load_model("tiny-llama")
    plant_copy(model, cancelling=cancelling)
    pairs = copy_pairs(model.tokenizer, 16, seed=1)
    return model, pairs.select(range(8)), pairs.select(range(8, 16))


@pytest.fixture(scope="module")
def trap():
    """The copy circuit beside two heads that write ±4× the reader's answer: alone each matters most, together 0."""
    return _planted(CANCELLING)


def _single_edge(model, pairs, edges) -> EdgeScores:
    """Every edge patched alone on the model, exactly."""
    everything = set(range(len(edges)))
    masks = edge_masks(model.spec, edges, [everything - {i} for i in range(len(edges))] + [everything])
    readouts = mib_readout(pairs, "logit_diff")
    runs = torch.cat(
        [
            masked_run(model, b, resample_values(model, b), masks, readouts.of(b.idx))
            for b in circuit_batches(model, pairs, "suffix", 8, rows=list(readouts.rows))
        ],
        1,
    ).mean(1)
    return EdgeScores(model.spec, False, edges, tuple((runs[-1] - runs[:-1]).double().tolist()), "exact", 0.0)


def test_the_soft_run_at_zero_one_weights_is_the_hard_run_and_in_between_is_differentiable(trap):
    model, pairs, _ = trap
    edges = graph_edges(model.spec, False)
    readouts = mib_readout(pairs, "logit_diff")
    b = circuit_batches(model, pairs, "suffix", 8, rows=list(readouts.rows))[0]
    values = resample_values(model, b)
    circuits = [set(range(0, len(edges), 3)), {edges.index(e) for e in PATH}]
    hard = edge_masks(model.spec, edges, circuits)
    want = masked_run(model, b, values, hard, readouts.of(b.idx))
    got = soft_masked_run(model, b, values, hard.float(), readouts.of(b.idx))
    assert torch.allclose(got.detach().cpu(), want, atol=1e-4)
    half = (hard.float() * 0.5).requires_grad_(True)
    (grad,) = torch.autograd.grad(soft_masked_run(model, b, values, half, readouts.of(b.idx)).sum(), half)
    assert grad.abs().sum() > 0  # the weights between 0 and 1 carry a gradient


@pytest.mark.slow  # training and four MIB evaluations on the tiny model (a few CPU-s)
def test_learned_masks_find_the_path_that_single_edge_rankings_trade_for_a_cancelling_pair(trap):
    model, score, evaluate = trap
    edges = graph_edges(model.spec, False)
    p = (len(PATH) + 0.5) / len(edges)  # MIB keeps int(p · |E|) = 3 edges: the planted path's size
    grid = (p, 1.0)
    ig = eap_scores(model, score, "eap-ig", metric="logit_diff")
    learned = learn_edge_masks(model, score, start=ig, percentages=grid)
    assert learned.kept == "learned" and learned.cmd_learned < learned.cmd_start
    assert learned.scores.method == "edge-masks" and len(learned.scores) == len(edges)  # every edge scored
    assert {edges[i] for i in learned.scores.ranking(absolute=True)[:3]} == PATH
    boot = Uncertainty(n_boot=100)
    ranked = {
        "masks": learned.scores,
        "eap": eap_scores(model, score, "eap", metric="logit_diff"),
        "eap-ig": ig,
        "exact single edges": _single_edge(model, score, edges),
    }
    f = {k: mib_scores(model, evaluate, s, percentages=grid, uncertainty=boot) for k, s in ranked.items()}
    assert f["masks"].faithfulness_absolute[0].low > 0.8  # the path carries the answer on pairs it did not see
    for single in ("eap", "eap-ig", "exact single edges"):
        top = {edges[i] for i in ranked[single].ranking(absolute=True)[:3]}
        assert (Sender("head", *CANCELLING[0]), Receiver("logits")) in top  # a canceller outranks the path
        assert f[single].faithfulness_absolute[0].high < 0.2  # so its 3-edge circuit carries next to nothing
        diff, _ = paired_difference(f["masks"], f[single], boot)
        assert diff.high < 0  # the masks' CMD is lower, paired over the same evaluation pairs


def test_without_a_trap_the_masks_keep_the_path_and_zero_steps_keep_the_start():
    model, score, _ = _planted(())
    edges = graph_edges(model.spec, False)
    p = (len(PATH) + 0.5) / len(edges)
    ig = eap_scores(model, score, "eap-ig", metric="logit_diff")
    assert {edges[i] for i in ig.ranking(absolute=True)[:3]} == PATH  # no trap: attribution already finds it
    learned = learn_edge_masks(model, score, start=ig, percentages=(p, 1.0))
    assert {edges[i] for i in learned.scores.ranking(absolute=True)[:3]} == PATH
    assert learned.circuit(p) == PATH and learned.grid_sizes == (3, len(edges))  # the artefact: circuit and its f
    assert learned.f_at(3) == pytest.approx(1.0, abs=0.05) and learned.f_at(len(edges)) == 1.0
    with pytest.raises(ValueError, match="no size of 4 edges"):
        learned.f_at(4)
    same = learn_edge_masks(model, score, start=ig, steps=0)
    assert same.kept == "start" and same.loss == ()
    assert same.scores.ranking(absolute=True) == ig.ranking(absolute=True)  # the start's order, unchanged


def test_bad_settings_are_refused_with_the_fix(trap):
    model, score, _ = trap
    ig = eap_scores(model, score, "eap", metric="logit_diff")
    with pytest.raises(ValueError, match="temperature"):
        learn_edge_masks(model, score, start=ig, temperature=0.0)
    with pytest.raises(ValueError, match="percentages"):
        learn_edge_masks(model, score, start=ig, percentages=(0.5,))
