"""The search on whole circuits: its gradient is EAP at the model, a trap for single-edge ranking, MIB pairing."""

from __future__ import annotations

import pytest
import torch

from mathcircuits.circuit import INPUT, EdgeScores, Receiver, Sender, copy_pairs, eap_scores, graph_edges, mib_scores
from mathcircuits.circuit.batches import circuit_batches
from mathcircuits.circuit.mib import paired_difference
from mathcircuits.circuit.mib_metric import mib_readout
from mathcircuits.circuit.mib_run import edge_masks, mask_index, masked_gradient, masked_run
from mathcircuits.circuit.planted import CANCELLING, EITHER, plant_copy
from mathcircuits.circuit.search import search_circuits, step_sizes
from mathcircuits.circuit.wiring import resample_values
from mathcircuits.models import load_model
from mathcircuits.stats import Uncertainty

#: the planted copy path: the digit into the mover's values, the mover into the reader's, the reader out
PATH = {
    (INPUT, Receiver("v", 0, group=0)),
    (Sender("head", 0, 1), Receiver("v", 2, group=1)),
    (Sender("head", 2, 2), Receiver("logits")),
}


@pytest.fixture(scope="module")
def trap():
    """The copy circuit beside two heads that write ±4× the reader's answer: alone each matters most, together 0."""
    model = load_model("tiny-llama")
    plant_copy(model, cancelling=CANCELLING)
    pairs = copy_pairs(model.tokenizer, 16, seed=1)
    return model, pairs.select(range(8)), pairs.select(range(8, 16))


def _batches(model, pairs):
    readouts = mib_readout(pairs, "logit_diff")
    for b in circuit_batches(model, pairs, "suffix", 8, rows=list(readouts.rows)):
        yield b, resample_values(model, b), readouts.of(b.idx)


def test_step_sizes_reach_every_grid_size_in_bounded_steps():
    sizes = step_sizes(1000, (0.002, 0.01, 0.1, 0.5, 1.0), 0.5)
    assert {2, 10, 100, 500} <= set(sizes) and 1000 not in sizes
    assert sizes == sorted(sizes, reverse=True)
    assert all(b >= 0.5 * a for a, b in zip([1000, *sizes], sizes))
    assert len(step_sizes(1000, (0.002, 0.01, 0.1, 0.5, 1.0), 0.2)) < len(sizes)
    assert step_sizes(190, (0.001, 0.02, 1.0), 0.5)[-1] == 3  # a size of 0 (the empty circuit) is no step


def test_the_circuits_gradient_is_eap_at_the_model_and_a_slope_inside(trap):
    model, pairs, _ = trap
    edges = graph_edges(model.spec, False)
    f, b = mask_index(model.spec, edges)
    full = edge_masks(model.spec, edges, [set(range(len(edges)))])[0].float()
    total = torch.zeros_like(full)
    for batch, values, readout in _batches(model, pairs):
        total += masked_gradient(model, batch, values, full, readout)[1]
    eap = torch.tensor(eap_scores(model, pairs, "eap", metric="logit_diff").scores)
    got = total[f, b].double() / len(pairs)
    assert (got - eap).abs().max() <= 1e-4 * eap.abs().max()  # EAP = the gradient of the model's own keep weights
    # inside a circuit: the gradient of a kept edge is the slope of m as its weight moves (a finite difference)
    kept = set(torch.randperm(len(edges), generator=torch.Generator().manual_seed(0))[: len(edges) // 2].tolist())
    kept |= {edges.index(e) for e in PATH}
    keep = edge_masks(model.spec, edges, [kept])[0].float()
    batch, values, readout = next(_batches(model, pairs))
    _, grad = masked_gradient(model, batch, values, keep, readout)
    i = edges.index((Sender("head", 2, 2), Receiver("logits")))
    h = 1e-2
    moved = keep.clone()
    moved[f[i], b[i]] -= h
    lo = masked_gradient(model, batch, values, moved, readout)[0].sum()
    hi = masked_gradient(model, batch, values, keep, readout)[0].sum()
    assert abs(float((hi - lo) / h) - float(grad[f[i], b[i]])) <= 1e-2 * abs(float(grad[f[i], b[i]])) + 1e-3


def _single_edge(model, pairs, edges) -> EdgeScores:
    """Every edge patched alone on the model, exactly: MIB's single-edge ranking at its most exact."""
    everything = set(range(len(edges)))
    masks = edge_masks(model.spec, edges, [everything - {i} for i in range(len(edges))] + [everything])
    runs = torch.cat([masked_run(model, b, v, masks, r) for b, v, r in _batches(model, pairs)], 1).mean(1)
    return EdgeScores(model.spec, False, edges, tuple((runs[-1] - runs[:-1]).double().tolist()), "exact", 0.0)


@pytest.mark.slow  # a search and four MIB evaluations on the tiny model (about 15 CPU-s)
def test_the_search_finds_the_path_single_edge_rankings_trade_for_a_cancelling_pair(trap):
    model, score, evaluate = trap
    edges = graph_edges(model.spec, False)
    p = (len(PATH) + 0.5) / len(edges)  # MIB keeps int(p · |E|) = 3 edges: the planted path's size
    grid = (p, 1.0)
    ig = eap_scores(model, score, "eap-ig", metric="logit_diff")
    found = search_circuits(model, score, start=ig, percentages=grid)
    assert found.circuit(p) == PATH
    assert search_circuits(model, score, start=ig, percentages=grid, objective="pairs").circuit(p) == PATH
    size = eap_scores(model, score, "eap-ig", metric="logit_diff", aggregate="magnitude")  # keeps both cancellers
    assert {edges[i] for i in size.ranking(absolute=True)[:3]} != PATH
    guarded = search_circuits(model, score, start=size, percentages=grid, objective="pairs", min_wins=1.0)
    assert guarded.circuit(p) == PATH and guarded.min_wins == 1.0  # a step that wins on every scoring pair
    assert len(found.scores) == len(edges) and found.scores.method == "search"  # every edge scored
    boot = Uncertainty(n_boot=100)
    ranked = {
        "search": found.scores,
        "eap": eap_scores(model, score, "eap", metric="logit_diff"),
        "eap-ig": ig,
        "exact single edges": _single_edge(model, score, edges),
    }
    f = {k: mib_scores(model, evaluate, s, percentages=grid, uncertainty=boot) for k, s in ranked.items()}
    assert f["search"].faithfulness_absolute[0].low > 0.8  # the path carries the answer on pairs it did not see
    for single in ("eap", "eap-ig", "exact single edges"):
        top = {edges[i] for i in ranked[single].ranking(absolute=True)[:3]}
        assert (Sender("head", *CANCELLING[0]), Receiver("logits")) in top  # a canceller outranks the path
        assert f[single].faithfulness_absolute[0].high < 0.2  # so its 3-edge circuit carries next to nothing
        diff, _ = paired_difference(f["search"], f[single], boot)
        assert diff.high < 0  # the search's CMD is lower, paired over the same evaluation pairs


@pytest.fixture(scope="module")
def either():
    """Two heads that each carry the whole answer ("is there an x?"): patched alone neither matters, together all."""
    model = load_model("tiny-llama")
    plant_copy(model, readers=(), either=EITHER)
    pairs = copy_pairs(model.tokenizer, 16, seed=1, counterfactual="marker")
    return model, pairs.select(range(8)), pairs.select(range(8, 16))


@pytest.mark.slow  # every edge patched alone, a search and three MIB evaluations on the tiny model (about 10 CPU-s)
def test_the_search_keeps_one_of_two_edges_that_matter_only_together(either):
    model, score, evaluate = either
    edges = graph_edges(model.spec, False)
    flags = {(Sender("head", *h), Receiver("mlp", h[0])) for h in EITHER}
    need = {(INPUT, Receiver("v", 1, group=1)), (Sender("mlp", 1), Receiver("logits"))}
    p = (len(need) + 1.5) / len(edges)  # MIB keeps int(p · |E|) = 3 edges: the flag's input, one flagger, the MLP
    grid = (p, 1.0)
    everything = set(range(len(edges)))
    both = everything - {edges.index(e) for e in flags}
    runs = [float(torch.cat([masked_run(model, b, v, edge_masks(model.spec, edges, [c]), r) for b, v, r in
                             _batches(model, score)], 1).mean()) for c in (everything, both, set())]  # fmt: skip
    assert abs(runs[1] - runs[2]) < 0.01 * abs(runs[0] - runs[2])  # both patched: the answer is gone
    single = _single_edge(model, score, edges)
    for e in flags:  # each patched alone: nothing moves, so a single-edge ranking puts them among the noise
        assert abs(single.scores[edges.index(e)]) < 0.002 * abs(runs[0] - runs[2])
    ig = eap_scores(model, score, "eap-ig", metric="logit_diff")  # its path integral crosses the OR's ramp
    found = search_circuits(model, score, start=ig, percentages=grid)
    kept = found.circuit(p)
    assert need <= kept and len(kept & flags) == 1
    size = eap_scores(model, score, "eap-ig", metric="logit_diff", aggregate="magnitude")
    guarded = search_circuits(model, score, start=size, percentages=grid, objective="pairs", min_wins=1.0)
    assert need <= guarded.circuit(p) and len(guarded.circuit(p) & flags) == 1
    boot = Uncertainty(n_boot=100)
    ranked = {"search": found.scores, "eap": eap_scores(model, score, "eap", metric="logit_diff"),
              "exact single edges": single}  # fmt: skip
    f = {k: mib_scores(model, evaluate, s, percentages=grid, uncertainty=boot) for k, s in ranked.items()}
    assert f["search"].faithfulness_absolute[0].low > 0.9  # one flagger carries the answer on pairs it did not see
    for name in ("eap", "exact single edges"):
        assert not {edges[i] for i in ranked[name].ranking(absolute=True)[:3]} & flags
        assert f[name].faithfulness_absolute[0].high < 0.1
        diff, _ = paired_difference(f["search"], f[name], boot)
        assert diff.high < 0


def test_a_paired_difference_of_a_ranking_with_itself_is_exactly_zero(trap):
    model, score, evaluate = trap
    ig = eap_scores(model, score, "eap", metric="logit_diff")
    boot = Uncertainty(n_boot=50)
    a = mib_scores(model, evaluate, ig, percentages=(0.02, 0.2, 1.0), uncertainty=boot)
    cmd, cpr = paired_difference(a, a, boot)
    assert (cmd.value, cmd.low, cmd.high, cpr.value) == (0.0, 0.0, 0.0, 0.0)
    other = mib_scores(model, score, ig, percentages=(0.02, 0.2, 1.0), uncertainty=boot)
    with pytest.raises(ValueError, match="same pairs"):
        paired_difference(a, other, boot)
