"""Faithfulness the way the circuit was found, on a tiny Llama with a planted two-step circuit.

The plant: a layer-0 head at the marker ``x`` copies the prompt's one digit into the marker's
residual, and a layer-2 head at the last token reads it from the marker and writes the answer
(the digit). Every other head and MLP writes only noise. Discovery from the logits must find both
heads (the second through a value edge), the planted circuit's faithfulness must be near 1 and
random circuits of its shape near 0; a counterfactual that changes nothing leaves no behaviour to
explain, which must read "ill-conditioned", not a ratio.
"""

from functools import cache

import pytest
import torch

from mathcircuits.circuit import (
    LOGITS,
    Circuit,
    Faithfulness,
    circuit_batches,
    copy_pairs,
    discover_circuit,
    faithfulness,
    plant_two_step,
)
from mathcircuits.circuit.intervene import Wiring, check_circuit_run, circuit_logprob
from mathcircuits.circuit.pair_cache import position_scores
from mathcircuits.circuit.planted import MOVER, READER
from mathcircuits.circuit.pool import pool_means
from mathcircuits.circuit.subcircuits import edge_order, size_grid, top_wiring
from mathcircuits.circuit.wiring import resample_values
from mathcircuits.data import PairSet
from mathcircuits.models import load_model
from mathcircuits.stats import Uncertainty


@cache
def planted():
    model = load_model("tiny-llama")
    plant_two_step(model)
    return (
        model,
        copy_pairs(model.tokenizer, 8, 0),
        copy_pairs(model.tokenizer, 12, 1),
        copy_pairs(model.tokenizer, 40, 2),
    )


@cache
def found():
    model, disc, _, _ = planted()
    return discover_circuit(
        model, disc, depth=3, positions="roles", top_k=2, logits_top_k=3, uncertainty=Uncertainty(n_boot=100)
    )


def test_the_plant_answers_by_the_two_heads():
    model, disc, _, _ = planted()
    b = circuit_batches(model, disc, "roles", 16)[0]
    with torch.no_grad():
        logp = position_scores(model.bridge(b.tokens)[:, -1:], b.answers)[1]
    assert float(logp.exp().mean()) > 0.9, "the planted model copies the digit"


@pytest.mark.slow
def test_discovery_finds_the_planted_heads_first_and_stops_when_saturated():
    circuit = found()
    order = edge_order(circuit)
    assert (order[0].sender, order[0].receiver) == ("L2.H2@last", "logits")
    assert (order[1].sender, order[1].receiver, order[1].via) == ("L0.H1@op", "L2.H2@last", "v")
    rounds = circuit.settings.rounds
    assert rounds[1].faithfulness > 0.9 and circuit.settings.stopped.startswith(("saturated", "no new"))
    assert len(rounds) <= 3, "the plant needs two rounds; the third adds nothing"


@pytest.mark.slow
def test_planted_circuit_is_faithful_and_random_circuits_of_its_shape_are_not():
    model, _, ev, pool = planted()
    faith = faithfulness(
        model, ev, found(), pool=pool, points=6, n_random=20, uncertainty=Uncertainty(n_boot=200), completeness_sets=4
    )
    at = {p.size: p for p in faith.curve}
    two = at[2]  # the planted circuit: reader → logits, mover → reader (value)
    assert two.faithfulness["resample/edges"].value >= 0.9
    assert two.faithfulness["resample/edges"].low >= 0.8
    assert max(two.random) <= 0.2 and len(two.random) == 20
    assert at[1].faithfulness["resample/edges"].value < 0.3, "the reader alone reads a counterfactual marker"
    assert at[0].faithfulness["resample/edges"].value == pytest.approx(0.0, abs=1e-6), "empty = counterfactual run"
    assert faith.plateau_size <= 3 and {"L2.H2@last", "L0.H1@op"} <= set(faith.plateau_nodes)
    assert faith.necessity["resample"].value < 0.2, "ablating the planted heads removes the behaviour"
    assert all(abs(r.difference.value) < 0.2 for r in faith.completeness)
    assert faith.interval_over == "pairs" and not faith.ill_conditioned  # 2 templates < stats.MIN_CLUSTERS
    assert faith.denominator.low > 1.0


@pytest.mark.slow
def test_a_counterfactual_that_changes_nothing_is_ill_conditioned_not_a_ratio(tmp_path):
    model, _, _, pool = planted()
    same = copy_pairs(model.tokenizer, 8, 3, same=True)
    faith = faithfulness(model, same, found(), pool=pool, n_random=2, uncertainty=Uncertainty(n_boot=100))
    assert faith.ill_conditioned and faith.curve == () and "ill-conditioned" in faith.summary()
    assert faith.denominator.value == pytest.approx(0.0, abs=1e-6)
    back = Faithfulness.load(faith.save(tmp_path / "f.json"))
    assert back.ill_conditioned and back.denominator == faith.denominator


@pytest.mark.slow
def test_the_same_analysis_without_the_plant_finds_no_behaviour_to_explain():
    _, _, ev, pool = planted()
    plain = load_model("tiny-llama")  # the same random model, not planted: it does not copy the digit
    faith = faithfulness(
        plain, ev, found(), pool=pool, n_random=2, uncertainty=Uncertainty(n_boot=100), completeness_sets=0
    )
    assert faith.ill_conditioned and faith.curve == (), "no behaviour to explain, so no ratio"
    assert faith.denominator.low <= 0 <= faith.denominator.high or abs(faith.denominator.value) < 0.1


def test_edge_level_run_keeps_only_the_edges_and_every_run_equals_its_plain_forward():
    model, _, ev, _ = planted()
    b = circuit_batches(model, ev, "roles", 16)[0]
    v = resample_values(model, b)
    reader, mover = ("head", *READER, "last"), ("head", *MOVER, "op")
    stray = ("head", 1, 0, "last")
    cases = [
        Wiring(frozenset({reader, stray}), frozenset({(reader, LOGITS, "logits")})),  # stray: no edge to anything
        Wiring(frozenset({reader}), None),
        Wiring(frozenset({reader, mover}), frozenset({(reader, LOGITS, "logits")})),  # mover without its edge
        Wiring(frozenset({reader}), frozenset({(reader, LOGITS, "logits")})),
    ]
    fast = circuit_logprob(model, b, v, cases)
    assert torch.allclose(fast[0], fast[1], atol=1e-5), "a node without edges changes nothing at edge level"
    assert torch.allclose(fast[2], fast[3], atol=1e-5), "the mover counts only through its edge"
    plain = circuit_logprob(model, b, v, cases, fast=False)
    assert torch.allclose(fast, plain, atol=1e-4)
    diff, tol = check_circuit_run(model)
    assert diff <= tol


def test_position_means_are_the_pool_average_without_the_scored_pairs():
    model, _, ev, pool = planted()
    means = pool_means(model, pool, exclude={("t1", a, b) for a, b in zip(pool.a, pool.b)})
    assert all(k[0] == "t2" for k in means.means), "every t1 prompt was left out"
    b = circuit_batches(model, ev, "roles", 16)[1]
    rows = [i for i, t in enumerate(pool.template_ids) if t == "t2"]
    toks = torch.tensor([pool.cf_tokens[i] for i in rows])
    _, c = model.bridge.run_with_cache(toks, names_filter=lambda n: n == "blocks.1.attn.hook_z")
    assert torch.allclose(means.values(b).z[0, :, 1], c["blocks.1.attn.hook_z"].mean(0), atol=1e-5)


def test_position_means_hold_no_property_of_the_answer():
    """Pool prompts whose answers have one or two tokens share one mean at the prompt positions (keyed on answer
    length, the mean would tell the ablated head how long the answer is); the second answer position averages
    only the prompts whose answer reaches it."""
    model, _, _, pool = planted()
    two = [i % 4 < 2 for i in range(len(pool))]  # both templates get both answer lengths
    pool = PairSet(
        pool.dataset.map(
            lambda r, i: {"answer_tokens": r["answer_tokens"] + [r["answer_tokens"][0]] * two[i]}, with_indices=True
        )
    )
    means = pool_means(model, pool)
    assert set(means.means) == {(str(t), 6) for t in pool.template_ids}, "one key per template and prompt length"
    for tid in {str(t) for t in pool.template_ids}:
        rows = [i for i, t in enumerate(pool.template_ids) if t == tid]
        n_two = sum(two[i] for i in rows)
        assert 0 < n_two < len(rows)
        assert means.counts[(tid, 6)].tolist() == [len(rows)] * 6 + [n_two]
        cf = torch.tensor([pool.cf_tokens[i] for i in rows])
        _, c = model.bridge.run_with_cache(cf, names_filter=lambda n: n == "blocks.1.attn.hook_z")
        assert torch.allclose(means.means[(tid, 6)].z[0, :6, 1], c["blocks.1.attn.hook_z"].mean(0), atol=1e-5)


def test_size_grid_and_top_circuits():
    assert size_grid(5, 20) == [0, 1, 2, 3, 4, 5]
    g = size_grid(100, 8)
    assert g[0] == 0 and g[-1] == 100 and len(g) <= 8 and g == sorted(set(g))
    circuit = found()
    order = edge_order(circuit)
    w = top_wiring(circuit, order, 2, "edges")
    assert len(w.edges) == 2 and len(w.nodes) == 2
    assert top_wiring(circuit, order, 2, "nodes").edges is None
    assert isinstance(circuit, Circuit) and dict(circuit.summary_items())["edges"] == str(len(circuit.edges)) != "0"
