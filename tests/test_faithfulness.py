"""Faithfulness the way the circuit was found, on a tiny Llama with a planted two-step circuit.

The plant: a layer-0 head at the marker ``x`` copies the prompt's one digit into the marker's
residual, and a layer-2 head at the last token reads it from the marker and writes the answer
(the digit). Every other head and MLP writes only noise. Discovery from the logits must find both
heads (the second through a value edge), the planted circuit's faithfulness must be near 1 and
random circuits of its shape near 0; a counterfactual that changes nothing leaves no behaviour to
explain, which must read "ill-conditioned", not a ratio.
"""

import random
from functools import cache

import datasets
import pytest
import torch

from mathcircuits.circuit import (
    Circuit,
    Faithfulness,
    Wiring,
    circuit_batches,
    circuit_logprob,
    discover_circuit,
    faithfulness,
    pool_means,
    resample_values,
)
from mathcircuits.circuit.cache import position_scores
from mathcircuits.circuit.intervene import LOGITS, check_circuit_run
from mathcircuits.circuit.subcircuits import edge_order, size_grid, top_wiring
from mathcircuits.models import load_model

MOVER, READER = (0, 1), (2, 2)  # (layer, head): the digit is moved to the marker, then read at the last token
TEMPLATES = {"t1": "{p}{A}{q}x{r}=", "t2": "{p}{q}{A}x{r}="}


def _plant(model) -> None:
    """Overwrite a tiny Llama (3 layers, 4 heads, 2 KV groups, d_model 64) with the two-step circuit.

    Residual dims: 0-9 the digit, 10 "is a digit", 11 "is the marker", 12 "is '='", 63 a constant; 40-49 the
    moved digit; 20-29 the answer (read by the unembedding); 30-39 noise. Attention is by content: queries and
    keys use the slowest rotary pair, which turns by < 0.01 rad over these prompts.
    """
    params = {n.replace("._original_component", ""): p for n, p in model.hf_model.named_parameters()}
    spec = model.spec
    dh, group = spec.d_head, spec.n_heads // spec.n_kv_heads
    slow = dh // 2 - 1
    tok = model.tokenizer
    digits = tok.convert_tokens_to_ids(list("0123456789"))
    gen = torch.Generator().manual_seed(0)
    noise = slice(30, 40)

    def rand(*shape, scale=0.3):
        return torch.randn(*shape, generator=gen) * scale

    with torch.no_grad():
        for name, p in params.items():
            p.copy_(torch.ones_like(p) if name.endswith("norm.weight") else torch.zeros_like(p))
        emb = params["model.embed_tokens.weight"]
        emb[:, 63] = 1.0
        emb[tok.convert_tokens_to_ids("x"), 11] = 1.0
        emb[tok.convert_tokens_to_ids("="), 12] = 1.0
        for j, t in enumerate(digits):
            emb[t, j] = emb[t, 10] = 1.0
            params["lm_head.weight"][t, 20 + j] = 3.0
        for layer in range(spec.n_layers):
            pre = f"model.layers.{layer}."
            q, k, v, o = (params[f"{pre}self_attn.{x}_proj.weight"] for x in "qkvo")
            planted = {(layer, h) for h in range(spec.n_heads)} & {MOVER, READER}
            planted_groups = {h // group for _, h in planted}
            for h in range(spec.n_heads):
                g, rows = h // group, slice(h * dh, (h + 1) * dh)
                if (layer, h) == MOVER:  # at the marker: attend to the digit, write its identity to 40-49
                    q[h * dh + slow, 11] = 4.0
                    k[g * dh + slow, 10] = 4.0
                    for j in range(10):
                        v[g * dh + j, j] = 1.0
                        o[40 + j, h * dh + j] = 1.0
                    continue
                if (layer, h) == READER:  # at '=': attend to the marker, copy 40-49 into the answer dims
                    q[h * dh + slow, 12] = 8.0
                    k[g * dh + slow, 11] = 8.0
                    for j in range(10):
                        v[g * dh + j, 40 + j] = 1.0
                        o[20 + j, h * dh + j] = 4.0
                    continue
                q[rows] = rand(dh, spec.d_model)
                o[noise, rows] = rand(10, dh, scale=0.05)
                if g not in planted_groups:
                    k[g * dh : (g + 1) * dh] = rand(dh, spec.d_model)
                    v[g * dh : (g + 1) * dh] = rand(dh, spec.d_model)
            params[f"{pre}mlp.gate_proj.weight"].copy_(rand(spec.d_mlp, spec.d_model))
            params[f"{pre}mlp.up_proj.weight"].copy_(rand(spec.d_mlp, spec.d_model))
            params[f"{pre}mlp.down_proj.weight"][noise] = rand(10, spec.d_mlp, scale=0.05)


def _pairs(tokenizer, n: int, seed: int, same: bool = False) -> datasets.Dataset:
    """Copy-the-digit prompts of two layouts; the counterfactual has another digit (``same``: the same prompt)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        tid = ("t1", "t2")[i % 2]
        d, other = rng.sample(range(10), 2)
        p, q, r = rng.choices("abcdefgh", k=3)
        prompt = TEMPLATES[tid].format(p=p, q=q, r=r, A=d)
        cf = prompt if same else TEMPLATES[tid].format(p=p, q=q, r=r, A=other)
        ids, cf_ids = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in (prompt, cf))
        ans = tokenizer(str(d), add_special_tokens=False)["input_ids"]
        rows.append({
            "prompt": prompt, "cf_prompt": cf, "answer": str(d), "tokens": ids, "cf_tokens": cf_ids,
            "answer_token": ans[0], "answer_tokens": ans, "n_tokens": len(ids), "operation": "copy",
            "template_id": tid, "a": d, "b": seed * 1000 + i, "prefix_len": 0, "pos_a": prompt.index(str(d)),
            "pos_op": prompt.index("x"), "pos_b": prompt.index("x") + 1, "pos_last": len(ids) - 1, "pair_id": i,
        })  # fmt: skip
    return datasets.Dataset.from_list(rows)


@cache
def planted():
    model = load_model("tiny-llama")
    _plant(model)
    return model, _pairs(model.tokenizer, 8, 0), _pairs(model.tokenizer, 12, 1), _pairs(model.tokenizer, 40, 2)


@cache
def found():
    model, disc, _, _ = planted()
    return discover_circuit(model, disc, depth=3, positions="roles", top_k=2, logits_top_k=3, n_boot=100)


def test_the_plant_answers_by_the_two_heads():
    model, disc, _, _ = planted()
    b = circuit_batches(model, disc, "roles", 16)[0]
    with torch.no_grad():
        logp = position_scores(model.bridge(b.tokens)[:, -1:], b.answers)[1]
    assert float(logp.exp().mean()) > 0.9, "the planted model copies the digit"


def test_discovery_finds_the_planted_heads_first_and_stops_when_saturated():
    circuit = found()
    order = edge_order(circuit)
    assert (order[0].sender, order[0].receiver) == ("L2.H2@last", "logits")
    assert (order[1].sender, order[1].receiver, order[1].via) == ("L0.H1@op", "L2.H2@last", "v")
    rounds = circuit.settings["rounds"]
    assert rounds[1]["faithfulness"] > 0.9 and circuit.settings["stopped"].startswith(("saturated", "no new"))
    assert len(rounds) <= 3, "the plant needs two rounds; the third adds nothing"


def test_planted_circuit_is_faithful_and_random_circuits_of_its_shape_are_not():
    model, _, ev, pool = planted()
    faith = faithfulness(model, ev, found(), pool=pool, points=6, n_random=20, n_boot=200, completeness_sets=4)
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
    assert faith.interval_over == "templates" and not faith.ill_conditioned
    assert faith.denominator.low > 1.0


def test_a_counterfactual_that_changes_nothing_is_ill_conditioned_not_a_ratio(tmp_path):
    model, _, _, pool = planted()
    same = _pairs(model.tokenizer, 8, 3, same=True)
    faith = faithfulness(model, same, found(), pool=pool, n_random=2, n_boot=100)
    assert faith.ill_conditioned and faith.curve == () and "ill-conditioned" in faith.summary()
    assert faith.denominator.value == pytest.approx(0.0, abs=1e-6)
    back = Faithfulness.load(faith.save(tmp_path / "f.json"))
    assert back.ill_conditioned and back.denominator == faith.denominator


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
    means = pool_means(model, pool, exclude={("t1", a, b) for a, b in zip(pool["a"], pool["b"])})
    assert all(k[0] == "t2" for k in means.means), "every t1 prompt was left out"
    b = circuit_batches(model, ev, "roles", 16)[1]
    rows = [i for i, t in enumerate(pool["template_id"]) if t == "t2"]
    toks = torch.tensor([pool["cf_tokens"][i] for i in rows])
    _, c = model.bridge.run_with_cache(toks, names_filter=lambda n: n == "blocks.1.attn.hook_z")
    assert torch.allclose(means.values(b).z[0, :, 1], c["blocks.1.attn.hook_z"].mean(0), atol=1e-5)


def test_size_grid_and_top_circuits():
    assert size_grid(5, 20) == [0, 1, 2, 3, 4, 5]
    g = size_grid(100, 8)
    assert g[0] == 0 and g[-1] == 100 and len(g) <= 8 and g == sorted(set(g))
    circuit = found()
    order = edge_order(circuit)
    w = top_wiring(circuit, order, 2, "edges")
    assert len(w.edges) == 2 and len(w.nodes) == 2
    assert top_wiring(circuit, order, 2, "nodes").edges is None
    assert isinstance(circuit, Circuit) and "edges" in repr(circuit)
