"""EAP and EAP-IG on every edge: exact where the model is linear, IG's convergence, the planted circuit, KV groups.

The planted copy model with every norm made the identity is linear in the digit's embedding along the path
from the counterfactual to the clean prompt, up to the readout: a linear readout (the answer's logit) makes
EAP exact, and a softmax readout (the answer's log-probability) saturates, so EAP misses and EAP-IG's Riemann
sum approaches the exact edge as 1/steps.
"""

import pytest
import torch

from mathcircuits import FixableError
from mathcircuits.circuit import (
    INPUT,
    Receiver,
    Sender,
    copy_pairs,
    discover_circuit,
    eap_scores,
    exact_agreement,
    exact_edges,
    graph_edges,
    ig_convergence,
    pair_cache,
    plant_two_step,
    upstream_senders,
)
from mathcircuits.circuit.eap import edge_attribution
from mathcircuits.circuit.eap_compare import discovery_scores
from mathcircuits.circuit.edges import patched_inputs, receiver_effects
from mathcircuits.data import GenerationConfig, PairSet, generate_pairs, load_templates
from mathcircuits.models import from_hf, hooks, load_model
from mathcircuits.models.families import block_structure
from mathcircuits.models.tiny import tiny_model
from mathcircuits.patching import get_metric
from mathcircuits.stats import Uncertainty

READER = Sender("head", 2, 2)


def _refused(call, word):
    with pytest.raises(ValueError) as err:
        call()
    assert isinstance(err.value, FixableError) and err.value.fix and word in str(err.value), str(err.value)


def _answer_logit(logits, answers):
    return logits[:, 0].gather(-1, answers[:, :1])[:, 0].float()


def _answer_logprob(logits, answers):
    return torch.log_softmax(logits.float(), -1).gather(-1, answers[..., None])[..., 0].sum(-1)


def _planted(linear: bool):
    model = load_model("tiny-llama")  # a fresh copy: its weights are overwritten
    plant_two_step(model)
    if linear:  # RMSNorm(x) = w x / sqrt(mean x² + eps) = x to float precision when eps ≫ |x|², w = √eps
        with torch.no_grad():
            for module in model.hf_model.modules():
                if hasattr(module, "variance_epsilon"):
                    module.variance_epsilon = 1e8
                    module.weight.fill_(1e4)
    pairs = copy_pairs(model.tokenizer, 8, seed=0)
    pairs = pairs.select([i for i, t in enumerate(pairs.template_ids) if t == "t1"])
    cache = pair_cache(
        model,
        torch.tensor(pairs.tokens),
        torch.tensor(pairs.cf_tokens),
        torch.tensor(pairs.answer_token),
        answers=torch.tensor(pairs.answer_tokens),
    )
    return model, pairs, cache


@pytest.fixture(scope="module")
def linear_planted():
    return _planted(linear=True)


def _to_logits(model, cache, readout, method, steps=1):
    """Effects of every head and MLP (the input excluded) on the logits receiver: [pair, sender]."""
    return edge_attribution(model, cache, readout, method, steps)[:, 1:, -1]


def test_eap_equals_exact_edges_into_a_linear_readout(linear_planted):
    model, _, cache = linear_planted
    senders = upstream_senders(model.spec, Receiver("logits"), False)
    every = list(range(cache.tokens.shape[1]))
    exact = exact_edges(model, cache, Receiver("logits"), senders, every, get_metric("logit_diff")).effects
    eap = _to_logits(model, cache, _answer_logit, "eap")
    assert exact[:, senders.index(READER)].abs().min() > 5.0  # the reader carries the answer
    assert (eap - exact).abs().max() <= 1e-5 * exact.abs().max()


@pytest.mark.slow
def test_eap_ig_approaches_exact_edges_as_steps_grow_where_eap_saturates(linear_planted):
    model, _, cache = linear_planted
    senders = upstream_senders(model.spec, Receiver("logits"), False)
    every = list(range(cache.tokens.shape[1]))
    exact = exact_edges(model, cache, Receiver("logits"), senders, every, get_metric("answer_logprob")).effects
    size = exact.abs().max()
    eap = _to_logits(model, cache, _answer_logprob, "eap")
    assert (eap - exact).abs().max() > 0.5 * size  # the clean run's softmax is saturated: its gradient is ~0
    ig = {n: edge_attribution(model, cache, _answer_logprob, "eap-ig", n) for n in (1, 5, 20)}
    err = {n: float((g[:, 1:, -1] - exact).abs().max()) for n, g in ig.items()}
    assert err[1] > err[5] > err[20] and err[20] <= 0.06 * size
    assert err[1] / err[20] == pytest.approx(20, rel=0.1)  # a left Riemann sum: error ∝ 1/steps
    # completeness: every edge into the logits together carries the whole change, m(cf) − m(clean)
    with torch.no_grad():
        n_ans = cache.all_answers.shape[1]
        total = _answer_logprob(model.bridge(cache.cf_tokens)[:, -n_ans:], cache.all_answers) - _answer_logprob(
            model.bridge(cache.tokens)[:, -n_ans:], cache.all_answers
        )
    assert total.abs().min() > 5.0
    for n, g in ig.items():  # the sum's error shrinks with the steps, as the Riemann sum's does
        assert (g[:, :, -1].sum(1) - total).abs().max() == pytest.approx(err[n], rel=0.01)


def _random_model(name):
    return from_hf(*tiny_model("gemma3", n_kv_heads=1)) if name == "tiny-gemma3-mqa" else load_model(name)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3-mqa"])
def test_eap_is_the_first_order_term_of_the_exact_edge_where_no_mlp_lies_between(name):
    """MLP0 → layer 1's q/k/v/MLP and L1.H2 → MLP1 reach the receiver directly: EAP = d/dε of the exact edge at 0.

    Along ε, the receiver reads its residual plus ε·Δ (Δ: the sender's counterfactual − clean output), so the
    slope is the whole first-order term, the receiver's norm included.
    """
    model = _random_model(name)
    ds = generate_pairs(model.tokenizer, load_templates(), GenerationConfig(("add",), ("add_eq_1",), 4))
    answers = torch.tensor(ds.answer_token)
    cache = pair_cache(model, torch.tensor(ds.tokens), torch.tensor(ds.cf_tokens), answers)
    metric, S = get_metric("logit_diff"), cache.tokens.shape[1]
    eap_all = edge_attribution(model, cache, _answer_logit, "eap")
    eap_last = edge_attribution(model, cache, _answer_logit, "eap", positions=[S - 1])
    structure = block_structure(model)
    edges = graph_edges(model.spec, structure.parallel)
    senders = [INPUT, *upstream_senders(model.spec, Receiver("logits"), structure.parallel)]
    columns = {r: j for j, r in enumerate(dict.fromkeys(r for _, r in edges))}
    mlp0 = cache.cf[hooks.mlp_out(0)] - cache.ref[hooks.mlp_out(0)]
    jobs = [(Sender("mlp", 0), r, mlp0) for r in _receivers_of_layer_1()]
    if structure.attn_out_norm is None:  # a head's output joins the residual as (z' − z) W_O
        dz = cache.cf[hooks.z(1)][:, :, 2] - cache.ref[hooks.z(1)][:, :, 2]
        jobs.append((Sender("head", 1, 2), Receiver("mlp", 1), dz @ model.bridge.W_O[1, 2]))
    for s, r, delta in jobs:
        where = Receiver("q", 1, head=2, position=S - 1) if r.kind == "q" else r
        changed = patched_inputs(model, cache, where, [s], list(range(S)))[0]
        start = changed[0]
        base = cache.ref[where.hook()][:, start:]
        base = base if r.kind == "mlp" else base[..., r.index, :]

        def along(eps, where=where, s=s, changed=changed, start=start, base=base, delta=delta):
            new = patched_inputs(model, cache, where, [s], changed, delta=eps * delta[None][:, :, changed])[1]
            values = base[None].clone()
            values[:, :, [p - start for p in changed]] = new
            return receiver_effects(model, cache, where, values, start, metric, 256)[0]

        slope = (along(0.05) - along(-0.05)) / 0.1
        eap = (eap_last if r.kind == "q" else eap_all)[:, senders.index(s), columns[r]]
        assert slope.abs().max() > 1e-4, (name, r.name, s.name)
        assert (eap - slope).abs().max() <= 0.02 * slope.abs().max(), (name, r.name, s.name, eap, slope)


def _receivers_of_layer_1():
    return [Receiver("q", 1, head=2), Receiver("k", 1, group=0), Receiver("v", 1, group=0), Receiver("mlp", 1)]


def test_eap_ig_puts_the_planted_circuit_first_with_kv_groups_as_receivers():
    model, pairs, _ = _planted(linear=False)
    scores = eap_scores(model, pairs, "eap-ig", steps=5, metric="logit_diff", batch_size=4)
    assert scores.is_whole_graph and scores.method == "eap-ig" and scores.seconds > 0
    kv = [r for _, r in scores.edges if r.kind in ("k", "v")]
    assert {r.group for r in kv} == set(range(model.spec.n_kv_heads)) and all(r.head == -1 for r in kv)
    planted = {  # the digit's value into the mover's group, the mover into the reader's group, the reader out
        (INPUT, Receiver("v", 0, group=0)),
        (Sender("head", 0, 1), Receiver("v", 2, group=1)),
        (READER, Receiver("logits")),
    }
    top = scores.top(4)
    assert {e for e, _ in top[:3]} == planted
    assert top[3][1] < 0.01 * top[2][1]  # nothing else carries the answer


@pytest.mark.slow
def test_ig_convergence_is_the_direct_computation_at_each_step_count(linear_planted):
    model, pairs, cache = linear_planted
    conv = ig_convergence(
        model, pairs, steps=(1, 2, 4), metric="answer_logprob", k=3, uncertainty=Uncertainty(n_boot=50), batch_size=8
    )
    assert conv.steps == (1, 2, 4) and conv.agreement[-1].spearman.value == pytest.approx(1.0)
    direct = {n: edge_attribution(model, cache, _answer_logprob, "eap-ig", n) for n in (1, 2, 4)}
    for n, a in zip(conv.steps, conv.agreement):  # the nested α grid gives what each step count gives alone
        want = float((direct[n].mean(0) - direct[4].mean(0)).abs().max())
        assert a.max_abs_diff == pytest.approx(want, rel=1e-3, abs=1e-5)
    assert conv.agreement[0].max_abs_diff > conv.agreement[1].max_abs_diff > 0  # fewer steps: further off
    assert list(conv.to_dataframe()["steps"]) == [1, 2, 4]


@pytest.mark.slow
def test_exact_agreement_finds_the_planted_edges_first(linear_planted):
    model, pairs, _ = linear_planted
    receivers = [Receiver("logits"), Receiver("v", 2, group=1)]
    agree = exact_agreement(model, pairs, receivers, steps=20, k=2, uncertainty=Uncertainty(n_boot=50))
    assert agree.receivers == ("logits", "L2.G1.v") and agree.n_edges == 15 + 10
    assert agree.eap_ig.top_k_overlap.value == 1.0  # the reader → logits and the mover → the reader's values
    assert agree.eap_ig.spearman.value > agree.eap.spearman.value - 1e-9
    assert set(agree.seconds) == {"exact", "eap", "eap-ig"}


def test_bad_attribution_requests_are_refused(linear_planted):
    model, pairs, cache = linear_planted
    _refused(lambda: edge_attribution(model, cache, _answer_logprob, "eap-ig", 0), "steps")
    bare = PairSet(pairs.dataset.remove_columns("cf_answer_tokens"))
    _refused(lambda: eap_scores(model, bare, metric="logit_diff"), "cf_answer_tokens")
    _refused(lambda: ig_convergence(model, pairs, steps=(5, 2)), "increasing")


@pytest.mark.slow
def test_discovery_scores_rank_the_discovered_circuit_first_and_attribution_the_rest():
    model, pairs, _ = _planted(linear=False)
    circuit = discover_circuit(
        model, pairs, depth=2, batch_size=4, uncertainty=Uncertainty(n_boot=20), saturation_tol=None
    )
    rest = eap_scores(model, pairs, "eap", metric="answer_logprob")
    scores = discovery_scores(circuit, model, rest)
    assert scores.is_whole_graph and scores.method == "exact"
    (first, n_exact), (second, n_rest) = scores.parts
    assert (first, second) == ("exact", "eap") and n_exact + n_rest == len(scores)  # no stretch unnamed
    top = [scores.edges[i] for i in scores.ranking(absolute=True)[:n_exact]]
    mover_v = (Sender("head", 0, 1), Receiver("v", 2, group=1))
    for edge in [(READER, Receiver("logits")), mover_v, (INPUT, Receiver("v", 0, group=0))]:
        assert edge in top  # the path from the input (the mover's value) to the logits
    assert 0 < n_exact < len(scores) // 2  # discovery ranks a small part, the attribution the rest
    below = scores.ranking(absolute=True)[n_exact:]  # the rest in the attribution's own order
    assert below == [i for i in rest.ranking(absolute=True) if i in set(below)]
