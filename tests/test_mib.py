"""MIB's circuit metrics on a planted model: CPR/CMD against hand-computed areas, pruning, the graph's edges."""

from __future__ import annotations

import json

import pytest
import torch

from mathcircuits.circuit import (
    INPUT,
    EdgeScores,
    Receiver,
    Sender,
    copy_pairs,
    graph_edges,
    mib_scores,
    plant_two_step,
    read_graph,
    write_graph,
)
from mathcircuits.circuit.mib import area_under, prune_edges
from mathcircuits.circuit.mib_result import MIB_PERCENTAGES
from mathcircuits.circuit.plateau import PLATEAU_FLOOR, SATURATION_FLOOR, find_plateau, round_saturated
from mathcircuits.data import GenerationConfig, PairSet, generate_pairs, load_templates
from mathcircuits.data.mib_kinds import MIB_KINDS, mib_template_dir
from mathcircuits.models import load_model
from mathcircuits.stats import Interval, Uncertainty

MOVER_H, READER_H = Sender("head", 0, 1), Sender("head", 2, 2)
#: the planted copy circuit as edges of the graph (tiny Llama: 4 heads in 2 KV groups of 2)
PLANTED = (
    (INPUT, Receiver("q", 0, head=1)),
    (INPUT, Receiver("k", 0, group=0)),
    (INPUT, Receiver("v", 0, group=0)),
    (MOVER_H, Receiver("v", 2, group=1)),
    (INPUT, Receiver("q", 2, head=2)),
    (INPUT, Receiver("k", 2, group=1)),
    (READER_H, Receiver("logits")),
)


@pytest.fixture(scope="module")
def planted():
    model = load_model("tiny-llama")
    plant_two_step(model)
    return model, copy_pairs(model.tokenizer, 16, 1)


def _scores(model, first: bool) -> EdgeScores:
    edges = graph_edges(model.spec, parallel=False)
    top, rest = (1.0, 0.0) if first else (-1.0, 0.0)
    return EdgeScores(model.spec, False, edges, tuple(top if e in PLANTED else rest for e in edges), "exact", 0.0)


def test_graph_edges_count_the_whole_graph(tiny_llama):
    spec = tiny_llama.spec  # 3 layers, 4 heads, 2 KV groups: per layer 4 q + 2 k + 2 v receivers, 1 MLP
    upstream = [1 + 5 * layer for layer in range(spec.n_layers)]  # input + 4 heads and an MLP per earlier layer
    expected = sum(8 * u + (u + 4) for u in upstream) + (1 + 5 * spec.n_layers)
    edges = graph_edges(spec, parallel=False)
    assert len(edges) == expected == 190
    assert len(graph_edges(spec, parallel=True)) == expected - 4 * spec.n_layers  # no head → own-layer MLP edges


def test_area_matches_mib_trapezoids_by_hand():
    x = MIB_PERCENTAGES
    step = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 1, 1], dtype=torch.float64)  # f jumps to 1 at 5 %
    # by hand: (0.05 - 0.02) * 1/2 + (1 - 0.05) * 1 = 0.965; |1 - f|: (0.02 - 0.001) + 0.015 = 0.034
    assert float(area_under(x, step)) == pytest.approx(0.965)
    assert float(area_under(x, (1 - step).abs())) == pytest.approx(0.034)
    assert float(area_under(x, torch.ones(10, dtype=torch.float64))) == pytest.approx(0.999)  # not rescaled


def test_prune_keeps_only_connected_edges(tiny_llama):
    edges = graph_edges(tiny_llama.spec, parallel=False)
    at = {e: i for i, e in enumerate(edges)}
    h = Sender("head", 0, 1)
    into, out = at[(INPUT, Receiver("q", 0, head=1))], at[(h, Receiver("logits"))]
    g = tiny_llama.spec.group_size
    assert prune_edges(edges, {into}, g) == set()  # the head has no outgoing edge
    assert prune_edges(edges, {out}, g) == set()  # ... or no incoming one
    assert prune_edges(edges, {into, out}, g) == {into, out}
    kv = at[(INPUT, Receiver("k", 0, group=0))]  # group 0 = heads 0 and 1: its key edge reaches head 1
    assert prune_edges(edges, {kv, out}, g) == {kv, out}
    other = at[(INPUT, Receiver("k", 0, group=1))]  # group 1 = heads 2, 3: not head 1
    assert prune_edges(edges, {other, out}, g) == set()


def test_cpr_cmd_on_the_planted_circuit(planted):
    model, pairs = planted
    good = mib_scores(model, pairs, _scores(model, first=True), uncertainty=Uncertainty(n_boot=200))
    # 190 edges: at 5 % (9 edges) the 7 planted edges are all in, below (≤ 3 edges) the circuit is incomplete
    assert good.kept_signed[:5] == (0, 0, 0, 0, 0)
    assert good.kept_signed[5] == len(PLANTED)
    f = [iv.value for iv in good.faithfulness_signed]
    assert f[:5] == pytest.approx([0.0] * 5, abs=1e-9)  # the empty circuit is the counterfactual run
    assert min(f[5:]) > 0.9 and f[-1] == pytest.approx(1.0)
    assert good.cpr.value == pytest.approx(0.965, abs=0.03)  # the step curve's area by hand (test above)
    assert good.cmd.value == pytest.approx(0.034, abs=0.03)
    assert good.cpr.low <= good.cpr.value <= good.cpr.high
    # the same formulas on its own points
    assert good.cpr.value == pytest.approx(float(area_under(good.percentages, torch.tensor(f))), abs=1e-6)
    # ranked last (signed): the circuit is whole only at 100 % → area 0.5 · 0.5 = 0.25 by hand
    bad = mib_scores(model, pairs, _scores(model, first=False), uncertainty=Uncertainty(n_boot=50))
    assert bad.cpr.value == pytest.approx(0.25, abs=0.01)
    assert bad.cmd.value == pytest.approx(good.cmd.value, abs=1e-9)  # |score| ranks the planted edges first again
    assert good.dropped == 0 and good.label == "MIB-style"


def test_logit_diff_is_mibs(planted):
    """m(N) is logit(answer) − logit(counterfactual answer) at the last prompt token, from a plain forward."""
    model, pairs = planted
    res = mib_scores(model, pairs, _scores(model, first=True), percentages=(0.05, 1.0), uncertainty=None)
    diffs, cf_diffs = [], []
    for row in pairs.dataset:
        for toks, out in ((row["tokens"], diffs), (row["cf_tokens"], cf_diffs)):
            with torch.no_grad():
                logits = model.bridge(torch.tensor([toks]))[0, -1]
            out.append(float(logits[row["answer_tokens"][0]] - logits[row["cf_answer_tokens"][0]]))
    assert res.clean == pytest.approx(sum(diffs) / len(diffs), abs=1e-4)
    assert res.counterfactual == pytest.approx(sum(cf_diffs) / len(cf_diffs), abs=1e-4)
    lp = mib_scores(
        model, pairs, _scores(model, first=True), metric="answer_logprob", percentages=(1.0,), uncertainty=None
    )
    assert lp.clean < 0 and lp.clean != pytest.approx(res.clean)


def test_bad_inputs_are_refused(planted, tiny_llama):
    model, pairs = planted
    edges = graph_edges(model.spec, parallel=False)
    with pytest.raises((ValueError, TypeError)):  # the runtime type check or __post_init__ refuses the choice
        EdgeScores(model.spec, False, edges, (0.0,) * len(edges), "magic", 0.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not an edge"):
        EdgeScores(model.spec, False, ((INPUT, Receiver("k", 0, head=1, by_group=True)),), (1.0,), "eap", 0.0)
    with pytest.raises(ValueError, match="whole graph"):
        mib_scores(model, pairs, EdgeScores(model.spec, False, edges[:5], (1.0,) * 5, "eap", 0.0))
    with pytest.raises(ValueError, match="percentages"):
        mib_scores(model, pairs, _scores(model, True), percentages=(0.5, 0.1))
    with pytest.raises(ValueError, match="cf_answer_tokens"):
        mib_scores(model, PairSet(pairs.dataset.remove_columns("cf_answer_tokens")), _scores(model, True))


def test_graph_file_round_trip(tmp_path, tiny_llama):
    spec = tiny_llama.spec
    edges = graph_edges(spec, parallel=False)
    gen = torch.Generator().manual_seed(0)
    values = tuple(float(x) for x in torch.randn(len(edges), generator=gen, dtype=torch.float64))
    scores = EdgeScores(spec, False, edges, values, "eap-ig", 3.5)
    circuit = frozenset(e for e, _ in scores.top(12, absolute=True))
    path = write_graph(scores, tmp_path / "g.json", circuit=circuit)
    raw = json.loads(path.read_text())
    assert raw["cfg"]["n_heads"] == 4 and "input->a0.h0<q>" in raw["edges"] and "m2->logits" in raw["edges"]
    assert len(raw["edges"]) == len(edges) + 2 * 2 * sum(1 + 5 * layer for layer in range(3))  # k/v ungrouped
    back = read_graph(path, spec, parallel=False)
    assert back.scores.edges == edges
    assert back.scores.scores == pytest.approx(values, abs=1e-12)  # group of 2: x/2 + x/2 == x
    assert back.circuit == circuit and back.split_groups == 0
    assert back.scores.method == "imported"


def test_a_hand_written_eap_ig_file_imports(tmp_path, tiny_llama):
    spec = tiny_llama.spec
    cfg = {"n_layers": 3, "n_heads": 4, "parallel_attn_mlp": False, "d_model": 64}
    edges = {
        "input->a0.h1<q>": {"score": 0.5, "in_graph": True},
        "input->a0.h0<k>": {"score": 0.25, "in_graph": False},
        "input->a0.h1<k>": {"score": 0.75, "in_graph": True},  # head 1 only: the group's key is split
        "a0.h1->m1": {"score": -2.0, "in_graph": False},
        "a0.h1->logits": {"score": 1.5, "in_graph": True},
    }
    path = tmp_path / "theirs.json"
    path.write_text(json.dumps({"cfg": cfg, "nodes": {"input": {"in_graph": True}}, "edges": edges}))
    read = read_graph(path, spec, parallel=False)
    h = Sender("head", 0, 1)
    assert read.scores.score(INPUT, Receiver("q", 0, head=1)) == 0.5
    assert read.scores.score(INPUT, Receiver("k", 0, group=0)) == 1.0  # 0.25 + 0.75: the group's sum
    assert read.scores.score(h, Receiver("mlp", 1)) == -2.0
    assert read.scores.score(h, Receiver("v", 2, group=0)) == 0.0  # not in the file
    assert read.circuit == {(INPUT, Receiver("q", 0, head=1)), (INPUT, Receiver("k", 0, group=0)),
                            (h, Receiver("logits"))}  # fmt: skip
    assert read.split_groups == 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"cfg": cfg, "nodes": {}, "edges": {"a2.h0->a1.h0<q>": {"score": 1.0}}}))
    with pytest.raises(ValueError, match="backwards"):
        read_graph(bad, spec, parallel=False)
    bad.write_text(json.dumps({"cfg": {**cfg, "n_heads": 8}, "nodes": {}, "edges": {}}))
    with pytest.raises(ValueError, match="Fix: read the file made on this model"):
        read_graph(bad, spec, parallel=False)


def _iv(value: float, half: float = 0.005) -> Interval:
    return Interval(value, value - half, value + half, 48)


def test_plateau_is_relative_to_the_curves_scale():
    sizes = [0, 1, 2, 5, 10, 20]
    nan = float("nan")
    # a weak curve (maximum 0.03): an absolute tolerance of 0.05 would call the empty circuit the plateau
    weak = [_iv(0.0, 0.0), _iv(0.004), _iv(0.012), _iv(0.022), _iv(0.028), _iv(0.030)]
    size, reason, tol = find_plateau(sizes, weak, [0.0, 0.003, 0.003, 0.004, 0.004, 0.005], rel_tol=0.05)
    assert (size, reason) == (10, "plateau") and tol == PLATEAU_FLOOR  # 0.05 × 0.03 < the floor
    # a strong curve: the tolerance is 5 % of its span
    strong = [_iv(x) for x in (0.0, 0.30, 0.62, 0.85, 0.93, 0.95)]
    size, reason, tol = find_plateau(sizes, strong, [nan] * 6, rel_tol=0.05)
    assert (size, reason) == (10, "plateau") and tol == pytest.approx(0.0475)
    # nothing beats the random band: the only empty plateau
    flat = [_iv(0.0, 0.0)] + [_iv(0.004)] * 5
    assert find_plateau(sizes, flat, [0.01] * 6, 0.05)[:2] == (0, "empty")
    # mul: 0.022 [0.009, 0.030] at 5 edges beats a band ending at 0.006 → not empty
    mul = [_iv(0.0, 0.0), _iv(0.003), _iv(0.010), Interval(0.022, 0.009, 0.030, 48), _iv(0.02), _iv(0.021)]
    assert find_plateau(sizes, mul, [0.0, 0.004, 0.005, 0.006, 0.006, 0.006], 0.05)[:2] == (5, "plateau")
    # div: the whole circuit -0.008 [-0.021, -0.002] is worse than the counterfactual: a finding
    div = [_iv(0.0, 0.0)] + [_iv(-0.002)] * 4 + [Interval(-0.008, -0.021, -0.002, 48)]
    assert find_plateau(sizes, div, [0.004] * 6, 0.05)[:2] == (0, "negative")


def test_saturation_is_relative_with_a_floor():
    # weak curve: a round adding 0.01 at F = 0.03 is a third of the scale, not saturated (absolute 0.02 would stop)
    assert round_saturated([0.0, 0.02, 0.03], rel_tol=0.05) == (False, SATURATION_FLOOR)
    done, limit = round_saturated([0.0, 0.6, 0.8, 0.82], rel_tol=0.05)
    assert done and limit == pytest.approx(0.05 * 0.82)
    assert round_saturated([0.0, 0.001, 0.0015], rel_tol=0.05)[0]  # below the absolute floor
    assert round_saturated([0.0, 0.3, 0.2], rel_tol=0.05)[0]  # a round that loses faithfulness


@pytest.mark.slow
@pytest.mark.parametrize("operation", ["add", "sub"])
def test_mib_counterfactual_kinds_change_the_named_digit(tiny_llama, operation):
    sets = load_templates(mib_template_dir())
    assert "mib_sub" not in {t.id for s in load_templates() for t in s.templates}  # the default sets are unchanged
    for kind in MIB_KINDS:
        cfg = GenerationConfig(
            operations=(operation,), n_per_template=12, operand_range=(10, 99), fewshot=False, counterfactual=kind
        )
        ds = generate_pairs(tiny_llama.tokenizer, sets, cfg)
        for row in ds.dataset:
            a, b, x, y = row["a"], row["b"], row["cf_a"], row["cf_b"]
            assert row["prompt"].startswith("Q: How much is ") and row["counterfactual"] == kind
            assert len(row["tokens"]) == len(row["cf_tokens"]) and row["answer"] != row["cf_answer"]
            tens, ones = (a // 10, b // 10, x // 10, y // 10), (a % 10, b % 10, x % 10, y % 10)
            changed = {"ones_op1": (ones[0] != ones[2], (tens[0], b) == (tens[2], y)),
                       "ones_op2": (ones[1] != ones[3], (a, tens[1]) == (x, tens[3])),
                       "tens_op1": (tens[0] != tens[2], (ones[0], b) == (ones[2], y)),
                       "tens_op2": (tens[1] != tens[3], (a, ones[1]) == (x, ones[3])),
                       "ones_carry": (ones[0] != ones[2], (tens[0], b) == (tens[2], y)),
                       "random_counterfactual": ((a, b) != (x, y), True)}[kind]  # fmt: skip
            assert all(changed), (kind, a, b, x, y)
            if kind == "ones_carry":
                carry = (lambda p, q: p + q > 9) if operation == "add" else (lambda p, q: p < q)
                assert carry(ones[0], ones[1]) != carry(ones[2], ones[3])


@pytest.mark.slow
def test_masked_run_equals_the_position_wise_run(planted):
    """The whole-graph mask (one einsum per layer) against the position-wise circuit run, on random rankings."""
    model, pairs = planted
    edges = graph_edges(model.spec, parallel=False)
    gen = torch.Generator().manual_seed(3)
    values = tuple(float(x) for x in torch.randn(len(edges), generator=gen, dtype=torch.float64))
    scores = EdgeScores(model.spec, False, edges, values, "random", 0.0)
    grid = (0.05, 0.2, 0.5, 0.9)  # 5 %: pruned to nothing (a random ranking rarely connects 9 edges)
    kw = dict(percentages=grid, uncertainty=None, check=False)
    for metric in ("logit_diff", "answer_logprob"):
        fast = mib_scores(model, pairs, scores, metric=metric, run="masked", **kw)
        plain = mib_scores(model, pairs, scores, metric=metric, run="positions", **kw)
        assert fast.counterfactual == pytest.approx(plain.counterfactual, abs=1e-4)
        assert min(fast.kept_signed[1:]) > 0 and min(fast.kept_absolute[1:]) > 0  # non-trivial circuits
        for a, b in zip(fast.faithfulness_signed + fast.faithfulness_absolute,
                        plain.faithfulness_signed + plain.faithfulness_absolute):  # fmt: skip
            assert a.value == pytest.approx(b.value, abs=1e-4)
