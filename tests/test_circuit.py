"""Sender → receiver path patching, circuit discovery and faithfulness.

The fast method must equal the definition (two full hooked forwards per sender) on a GQA
Llama and on GPT-2, for every receiver kind; GQA key/value receivers are KV groups; bad
receivers and positions fail with errors that say the fix; circuits round-trip as JSON.
"""

import dataclasses
import time
from functools import cache

import pytest
import torch

from mathcircuits.circuit import (
    Circuit,
    CircuitSettings,
    Edge,
    Node,
    Receiver,
    Sender,
    attribute_edges,
    circuit_batches,
    discover_circuit,
    exact_edges,
    faithfulness,
    label_roles,
    pair_cache,
    reference_edges,
    screen_agreement,
    upstream_senders,
)
from mathcircuits.circuit.edges import patched_inputs, receiver_effects
from mathcircuits.data import GenerationConfig, generate_pairs, load_templates
from mathcircuits.models import from_hf, hooks, load_model
from mathcircuits.models.families import block_structure
from mathcircuits.models.tiny import tiny_model
from mathcircuits.patching import get_metric, path_patch
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.bootstrap import bootstrap_statistic

from helpers import tiered

# without its guard: a random tiny model's clean logits are near 0, which path_patch's guard (rightly) refuses
METRIC = dataclasses.replace(get_metric("relative_logit"), min_clean=None)


def _model(name):
    if name == "tiny-gemma3-mqa":  # one key/value head for all query heads (as Gemma 3 270M): K/V width = d_head
        return from_hf(*tiny_model("gemma3", n_kv_heads=1))
    return load_model(name)


@cache
def _setup(name):
    model = _model(name)
    cfg = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=4)
    ds = generate_pairs(model.tokenizer, load_templates(), cfg)
    t = torch.tensor(ds.tokens)
    pc = pair_cache(model, t, torch.tensor(ds.cf_tokens), torch.tensor(ds.answer_token))
    return model, ds, pc


def _receivers(model):
    L = model.spec.n_layers
    return [
        Receiver("q", L - 1, head=1),
        Receiver("q", 1, head=2, position=-3),
        Receiver("k", L - 1, group=0),
        Receiver("v", 1, head=1, by_group=True),
        Receiver("mlp", L - 1),
        Receiver("mlp", 0, position=-2),
    ]


@pytest.mark.parametrize(
    "name", tiered(["tiny-llama", "tiny-gpt2", "tiny-gemma3-mqa"], ["tiny-llama", "tiny-gemma3-mqa"])
)
@pytest.mark.slow
def test_fast_equals_reference_for_every_receiver_kind(name):
    model, ds, pc = _setup(name)
    seq = pc.tokens.shape[1]
    parallel = block_structure(model).parallel
    suffix = list(range(ds.prefix_len[0], seq))
    runs = []
    for receiver in _receivers(model):
        senders = upstream_senders(model.spec, receiver, parallel)
        for positions in (suffix, [seq - 3]):
            fast = exact_edges(model, pc, receiver, senders, positions, METRIC)
            ref = reference_edges(model, pc, receiver, senders, positions, METRIC)
            assert fast.effects.shape == (len(ds), len(senders))
            runs.append((receiver, (fast.effects - ref.effects).abs().max(), ref.effects.abs().max()))
    biggest = max(float(big) for _, _, big in runs)
    assert biggest > 1e-2  # the effects compared are not all zero
    for receiver, diff, big in runs:
        # float32: relative_logit without its guard divides by a random model's small clean-minus-cf logit, so
        # rounding grows with the effect (measured 1.9e-5 on effects of 0.022, 1.6e-4 on 0.57) and with that
        # shared denominator (4.6e-5 on a receiver whose effects are exactly 0, on another CPU): 1e-3 of either
        assert diff <= 1e-3 * max(float(big), biggest / 10) + 1e-5, receiver


def test_frozen_heads_confine_a_query_receiver_to_its_own_position():
    """A q receiver at the last position sees no sender patched elsewhere (by the definition, not only the shortcut)."""
    model, ds, pc = _setup("tiny-llama")
    receiver = Receiver("q", 2, head=0)
    senders = upstream_senders(model.spec, receiver, False)
    seq = pc.tokens.shape[1]
    ref = reference_edges(model, pc, receiver, senders, [seq - 2], METRIC)
    assert ref.effects.abs().max() < 1e-6
    assert reference_edges(model, pc, receiver, senders, [seq - 1], METRIC).effects.abs().max() > 1e-3


def test_a_key_receiver_is_a_kv_group_shared_by_its_query_heads():
    model, _, pc = _setup("tiny-llama")
    spec = model.spec
    assert spec.group_size == 2
    with pytest.raises(ValueError, match=r"KV groups of 2 query heads.*Fix: Receiver\('k', 2, group=1\)"):
        Receiver("k", 2, head=3).check(spec)
    r = Receiver("k", 2, head=3, by_group=True).check(spec)
    assert (r.group, r.shared_by(spec), r.name) == (1, [2, 3], "L2.G1.k")
    # the claim is true of the model: changing group 1's keys changes exactly heads 2 and 3's outputs
    store = {}

    def bump(act, hook):
        act = act.clone()
        act[:, :, 1] += 1.0
        return act

    def keep(act, hook):
        store["z"] = act.clone()

    with torch.no_grad():
        _, base = model.bridge.run_with_cache(pc.tokens, names_filter=hooks.z(2))
        model.bridge.run_with_hooks(pc.tokens, fwd_hooks=[(r.hook(), bump), (hooks.z(2), keep)])
    changed = (store["z"] - base[hooks.z(2)]).abs().amax(dim=(0, 1, 3)) > 1e-6
    assert changed.tolist() == [False, False, True, True]


def test_gpt2_keys_are_per_head():
    model, _, _ = _setup("tiny-gpt2")
    r = Receiver("k", 1, head=3).check(model.spec)  # no GQA: a head is its own group, no error
    assert r.group == 3 and r.shared_by(model.spec) == [3]


def test_bad_receivers_senders_and_positions_are_refused():
    model, _, pc = _setup("tiny-llama")
    with pytest.raises(ValueError, match=r"sender L2\.H0 lies at or after receiver L1\.H0\.q.*Fix"):
        exact_edges(model, pc, Receiver("q", 1, head=0), [Sender("head", 2, 0)], [-1], METRIC)
    with pytest.raises(ValueError, match=r"sender L1\.H0 lies at or after receiver L1\.G0\.v"):
        reference_edges(model, pc, Receiver("v", 1, group=0), [Sender("head", 1, 0)], [-1], METRIC)
    seq = pc.tokens.shape[1]
    with pytest.raises(ValueError, match=rf"sender positions \[{seq}\] are out of range.*Fix"):
        exact_edges(model, pc, Receiver("q", 2, head=0), [Sender("head", 0, 0)], [seq], METRIC)
    with pytest.raises(ValueError, match=r"receiver L2\.H0\.q@99.*out of range"):
        exact_edges(model, pc, Receiver("q", 2, head=0, position=99), [Sender("head", 0, 0)], [-1], METRIC)
    with pytest.raises(ValueError, match=r"KV group 5 is outside"):
        Receiver("v", 1, group=5).check(model.spec)
    # an MLP receiver reads its own layer's attention in sequential blocks: that head is upstream
    assert Receiver("mlp", 1).is_downstream_of(Sender("head", 1, 0), parallel=False)
    assert not Receiver("mlp", 1).is_downstream_of(Sender("head", 1, 0), parallel=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2"])
def test_logits_edges_need_no_forward_and_equal_the_definition_and_path_patch(name):
    """Sender → logits, heads frozen: the change passes the MLPs to the final residual at its own position only."""
    model, ds, pc = _setup(name)
    senders = upstream_senders(model.spec, Receiver("logits"), block_structure(model).parallel)
    answers = torch.tensor([(a + a)[:2] for a in ds.answer_tokens])  # two answer tokens per pair
    two = pair_cache(model, pc.tokens, pc.cf_tokens, answers[:, 0], answers=answers)
    seq = two.tokens.shape[1]
    for metric in (METRIC, get_metric("answer_logprob")):
        for where in ([seq - 2], [seq - 1], [seq - 2, seq - 1]):
            fast = exact_edges(model, two, Receiver("logits"), senders, where, metric)
            ref = reference_edges(model, two, Receiver("logits"), senders, where, metric)
            assert (fast.effects - ref.effects).abs().max() <= 1e-4, (metric.name, where)
    scan = path_patch(model, ds, senders=("heads", "mlps"), metric=METRIC, keep_per_pair=True)
    ours = exact_edges(model, pc, Receiver("logits"), senders, [-1], METRIC).effects
    heads, mlps = scan.per_pair_heads, scan.per_pair_mlps
    theirs = torch.stack([heads[:, s.layer, s.head] if s.kind == "head" else mlps[:, s.layer] for s in senders], 1)
    assert (ours - theirs).abs().max() <= 1e-4


@cache
def _circuit(method):
    model, ds, _ = _setup("tiny-llama")
    return discover_circuit(
        model,
        ds,
        [(2, 1), (2, 3)],
        depth=2,
        threshold=0.01,
        top_k=3,
        method=method,
        uncertainty=Uncertainty(n_boot=200),
        saturation_tol=None,
        positions="roles",
    )


@pytest.mark.slow  # two full discoveries with 200 bootstrap draws (about 11 s of CPU)
def test_discovery_is_the_same_by_both_methods_and_has_intervals():
    fast, ref = _circuit("exact"), _circuit("reference")
    assert [e.sender + e.receiver + e.via for e in fast.edges] == [e.sender + e.receiver + e.via for e in ref.edges]
    assert max(abs(a.effect - b.effect) for a, b in zip(fast.edges, ref.edges)) <= 1e-4
    assert len(fast.edges) > 2 and any(n.depth == 2 for n in fast.nodes)
    for e in fast.edges:
        assert e.low <= e.effect <= e.high
        assert e.shared_by == ((0, 1) if e.receiver.startswith("L2.H1") else (2, 3)) or e.via not in ("k", "v")
    assert all(abs(e.effect) >= 0.01 for e in fast.edges if e.receiver != "logits")


@pytest.mark.slow
def test_circuit_round_trips_as_json_and_turns_into_a_dataframe(tmp_path):
    model, ds, _ = _setup("tiny-llama")
    circuit = label_roles(model, ds, _circuit("exact"))
    assert all(n.role for n in circuit.nodes)
    path = circuit.save(tmp_path / "circuit.json")
    assert path.read_text().lstrip().startswith("{")
    back = Circuit.load(path)
    assert back == circuit
    df = back.to_dataframe()
    assert len(df) == len(circuit.edges) and {"sender", "receiver", "via", "effect", "low", "high"} <= set(df.columns)
    assert back.settings.depth == 2 and back.data.operations == ["add"]
    with pytest.raises(ValueError, match="names a node the circuit does not have"):
        Circuit(
            model=model.spec,
            nodes=(Node("logits", -1, -1, "logits"),),
            edges=(Edge("x", "logits", "q", 0.0, 0.0, 0.0),),
            metric="relative_logit",
            method="exact",
            n_pairs=1,
        )


@pytest.mark.slow
def test_a_circuit_of_every_node_scores_one_and_the_empty_circuit_zero():
    model, _, _ = _setup("tiny-llama")
    cfg = GenerationConfig(
        operations=("add",),
        template_ids=("add_eq_1", "add_eq_2", "add_eq_3", "add_st_1", "add_st_2"),  # >= stats.MIN_CLUSTERS templates
        n_per_template=3,
        seed=5,
        counterfactual="operands",
        fewshot_operations="same",  # on this random model the neutral prefix leaves m(M) - m(cf) within noise of 0
    )
    ds = generate_pairs(model.tokenizer, load_templates(), cfg)
    pool = generate_pairs(
        model.tokenizer, load_templates(), GenerationConfig(**{**cfg.to_dict(), "n_per_template": 12})
    )
    spec = model.spec
    labels = {lab for b in circuit_batches(model, ds, "suffix", 8) for lab in b.where}
    nodes = [Node("head", l, h, lab) for lab in labels for l in range(spec.n_layers) for h in range(spec.n_heads)]
    nodes += [Node("mlp", l, -1, lab) for lab in labels for l in range(spec.n_layers)]
    every = Circuit(model=spec, nodes=tuple(nodes), edges=(), metric="answer_logprob", method="exact", n_pairs=len(ds),
                    settings=CircuitSettings(positions="suffix"))  # fmt: skip
    f = faithfulness(
        model,
        ds,
        every,
        pool=pool,
        points=2,
        n_random=0,
        uncertainty=Uncertainty(n_boot=100),
        completeness_sets=0,
        min_gap=0.0,
        minimality_nodes=0,
    )
    top, empty = f.curve[-1], f.curve[0]
    for a in ("resample", "position_mean"):
        assert top.faithfulness[f"{a}/nodes"].value == pytest.approx(1.0, abs=1e-5), a
    assert empty.faithfulness["resample/nodes"].value == pytest.approx(0.0, abs=1e-5)
    assert f.interval_over == "templates" and f.primary == "resample/nodes"


def test_edge_intervals_are_bootstrap_intervals_of_the_per_pair_effects():
    model, ds, _ = _setup("tiny-llama")
    c = discover_circuit(
        model, ds, [(1, 0)], depth=0, uncertainty=Uncertainty(n_boot=200, seed=3), metric="relative_logit"
    )
    per_pair = path_patch(model, ds, senders=("heads",), metric=METRIC, keep_per_pair=True).per_pair_heads[:, 1, 0]
    iv = bootstrap_statistic(per_pair, uncertainty=Uncertainty(n_boot=200, seed=3))
    (edge,) = c.edges
    # two float32 paths (discovery's batched runs, path_patch's): equal to float rounding, which varies by CPU
    assert (edge.effect, edge.low, edge.high) == pytest.approx((iv.value, iv.low, iv.high), rel=1e-4, abs=1e-5)
    assert edge.low < edge.effect < edge.high


@pytest.mark.slow
def test_fast_equals_reference_on_the_embedded_model(embedded, embedded_add_pairs):
    ds = embedded_add_pairs.select(range(4))
    pc = pair_cache(embedded, torch.tensor(ds.tokens), torch.tensor(ds.cf_tokens), torch.tensor(ds.answer_token))
    seq = pc.tokens.shape[1]
    for receiver in (Receiver("q", 14, head=2), Receiver("k", 14, head=2, by_group=True)):
        senders = upstream_senders(embedded.spec, receiver, False)[-12:]
        pos = [seq - 1] if receiver.kind == "q" else [ds.pos_b[0][-1]]  # A precedes the operator: no effect
        fast = exact_edges(embedded, pc, receiver, senders, pos, METRIC)
        ref = reference_edges(embedded, pc, receiver, senders, pos, METRIC)
        assert (fast.effects - ref.effects).abs().max() <= 1e-4
        assert ref.effects.abs().max() > 1e-5  # the compared effects are not all zero


@pytest.mark.slow
def test_circuit_graph_and_report_section(tmp_path):
    from mathcircuits.report import ReportParts, build_report
    from mathcircuits.viz import circuit_graph

    model, ds, _ = _setup("tiny-llama")
    circuit = label_roles(model, ds, _circuit("exact"))
    fig = circuit_graph(circuit)
    nodes = [t for t in fig.data if t.name in ("head", "mlp", "logits")]
    assert sum(len(t.x) for t in nodes) == len(circuit.nodes)
    edge_text = next(t for t in fig.data if t.name == "edges").hovertext
    assert len(edge_text) == len(circuit.edges)
    strongest = circuit.strongest_edges(1)[0]
    assert any(f"{strongest.effect:+.4f}" in t and strongest.sender in t for t in edge_text)
    widths = [t.line.width for t in fig.data if t.mode == "lines"]
    assert max(widths) == pytest.approx(10) and min(widths) < max(widths)  # width follows |effect|
    page = build_report(tmp_path / "r.html", ReportParts.of(circuit=circuit)).read_text()
    assert 'id="circuit"' in page and strongest.sender in page and '<script src="http' not in page


@pytest.mark.integration
def test_circuit_stage_writes_the_circuit_its_curve_and_graph(tmp_path):
    from mathcircuits.circuit import Faithfulness
    from mathcircuits.pipeline import RunConfig, run_pipeline

    cfg = RunConfig.from_dict(
        {
            "model": {"source": "tiny-llama"},
            "data": {"operations": ["add"], "template_ids": ["add_eq_1", "add_eq_2"], "n_per_template": 3,
                     "keep_only_correct": False},
            "circuit": {"n_per_template": 4, "min_pairs": 6, "discovery_pairs": 4, "eval_pairs": 4,
                        "pool_per_template": 8, "depth": 1, "n_random": 2, "n_boot": 50, "points": 3,
                        "completeness_sets": 1, "screen": None, "logits_top_k": 2, "top_k": 1},
            "finetune": {"enabled": False},
            "evaluation": {"enabled": False},
        }
    )  # fmt: skip
    out = tmp_path / "run"
    summary = run_pipeline(cfg, out, only=["data", "circuit"], progress=False)["circuit"]
    circuit = Circuit.load(out / "circuit" / "circuit_add.json")
    faith = Faithfulness.load(out / "circuit" / "faithfulness_add.json")
    assert circuit.settings.depth == 1 and circuit.settings.positions == "query"
    assert not set(circuit.data.pair_ids) & set(circuit.data.eval_pair_ids), "discovery and evaluation disjoint"
    assert faith.n_pairs == 4 and set(faith.templates) == {"add_eq_1", "add_eq_2"}
    assert all(len(p.random) == 2 for p in faith.curve if p.size > 0)
    assert (out / "circuit" / "graph_add.html").read_text().count("plotly") > 0
    assert (out / "circuit" / "curve_add.html").exists()
    brief = summary.circuits["add"]  # the summary carries the saved circuit's size and its curve's own line
    assert set(summary.circuits) == {"add"} and brief.faith == faith.summary()
    components = [n for n in circuit.nodes if n.kind != "logits"]  # the summary counts heads and MLPs
    assert (brief.nodes, brief.edges, brief.eval_pairs) == (len(components), len(circuit.edges), faith.n_pairs)


def _o_proj_weights(model):
    return [p for n, p in model.bridge.named_parameters() if ("o_proj" in n or "attn.o." in n) and n.endswith("weight")]


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2"])
def test_attribution_screen_is_the_first_order_term_of_the_exact_edge(name):
    """Along r + ε(r̃ − r), the exact step 2's central difference at ε → 0 is the screen's estimate."""
    model, ds, pc = _setup(name)
    L = model.spec.n_layers
    op = ds.pos_op[0][-1]
    for receiver, pos in [(Receiver("q", L - 1, head=1), [-1]), (Receiver("k", L - 1, group=0), [op])]:
        r = receiver.check(model.spec)
        senders = upstream_senders(model.spec, r, block_structure(model).parallel, ("head",))
        screen = attribute_edges(model, pc, r, senders, pos, METRIC).effects
        changed, new = patched_inputs(model, pc, r, senders, pos)
        start = changed[0]
        base = pc.ref[r.hook()][:, start:, r.index]
        old = base[:, [p - start for p in changed]]

        def along(eps, base=base, new=new, old=old, changed=changed, start=start, r=r, senders=senders):
            values = base[None].repeat(len(senders), *([1] * base.dim())).clone()
            values[:, :, [p - start for p in changed]] = old[None] + eps * (new - old[None])
            return receiver_effects(model, pc, r, values, start, METRIC, 256).T

        eps = 0.05
        slope = (along(eps) - along(-eps)) / (2 * eps)
        assert (slope - screen).abs().max() <= 0.02 * slope.abs().max(), (r.name, slope, screen)


@pytest.mark.slow
def test_attribution_screen_ranks_a_planted_edge_first():
    model = load_model("tiny-llama")  # a fresh copy: its weights are changed below
    _, ds, _ = _setup("tiny-llama")
    with torch.no_grad():  # every head writes weakly except L0.H2, whose output is 30× stronger than the others'
        for layer, w in enumerate(_o_proj_weights(model)):
            keep = w[:, 2 * model.spec.d_head : 3 * model.spec.d_head].clone()
            w.mul_(0.1)
            if layer == 0:
                w[:, 2 * model.spec.d_head : 3 * model.spec.d_head] = 3 * keep
    pc = pair_cache(model, torch.tensor(ds.tokens), torch.tensor(ds.cf_tokens), torch.tensor(ds.answer_token))
    L = model.spec.n_layers
    for receiver in (Receiver("q", L - 1, head=1), Receiver("mlp", 1, position=-1)):
        senders = upstream_senders(model.spec, receiver, False, ("head",))
        exact = exact_edges(model, pc, receiver, senders, [-1], METRIC).effects
        screen = attribute_edges(model, pc, receiver, senders, [-1], METRIC).effects
        assert senders[int(exact.mean(0).abs().argmax())] == Sender("head", 0, 2)
        assert senders[int(screen.mean(0).abs().argmax())] == Sender("head", 0, 2)
        agree = screen_agreement(screen, exact, k=1, uncertainty=Uncertainty(n_boot=200))
        assert agree.top_k_overlap.value == 1.0 and agree.spearman.value > 0.5


def test_screen_agreement_counts_rank_matches_and_refuses_a_top_k_beyond_the_edges():
    exact = torch.tensor([[1.0, -4.0, 2.0, 0.5], [1.2, -3.8, 2.2, 0.4], [0.8, -4.2, 1.8, 0.6]])
    same = screen_agreement(exact * 0.5, exact, k=2, uncertainty=Uncertainty(n_boot=100))
    assert same.spearman.value == pytest.approx(1.0) and same.top_k_overlap.value == 1.0
    flipped = screen_agreement(
        -exact, exact, k=2, uncertainty=Uncertainty(n_boot=100)
    )  # the same sizes, the opposite order
    assert flipped.spearman.value == pytest.approx(-1.0) and flipped.top_k_overlap.value == 1.0
    elsewhere = torch.tensor([[3.0, 0.1, 0.2, -3.0]]).repeat(3, 1)  # its two largest are the exact's two smallest
    assert screen_agreement(elsewhere, exact, k=2, uncertainty=Uncertainty(n_boot=100)).top_k_overlap.value == 0.0
    with pytest.raises(ValueError, match="lower k"):
        screen_agreement(exact, exact, k=5)


def test_discover_with_the_screen_patches_only_the_screened_senders():
    model, ds, _ = _setup("tiny-llama")
    kw = {"depth": 1, "threshold": 0.0, "top_k": 2, "receivers": ("q",), "uncertainty": Uncertainty(n_boot=50)}
    full = discover_circuit(model, ds, [(2, 1)], screen=None, **kw)  # exact: every sender
    screened = discover_circuit(model, ds, [(2, 1)], screen=4, **kw)
    top = {(e.sender, e.receiver) for e in full.edges}
    assert {(e.sender, e.receiver) for e in screened.edges} == top  # the strongest exact edges survive the screen
    assert screened.settings.screen == 4
    for a, b in zip(
        sorted(full.edges, key=lambda e: (e.sender, e.receiver)),
        sorted(screened.edges, key=lambda e: (e.sender, e.receiver)),
    ):
        assert a.effect == pytest.approx(b.effect, abs=1e-6)  # and are measured exactly


@pytest.mark.slow
def test_the_time_budget_counts_cpu_seconds_not_wall_clock(monkeypatch):
    model, ds, _ = _setup("tiny-llama")
    args = dict(
        depth=2, threshold=0.01, top_k=3, uncertainty=Uncertainty(n_boot=20), saturation_tol=None, positions="roles"
    )
    spent = discover_circuit(model, ds, [(2, 1), (2, 3)], max_seconds=1e-9, **args)
    assert spent.settings.stopped == "time budget (0 CPU s, during round 1)"
    assert all(n.depth == 0 for n in spent.nodes if n.kind != "logits")
    # a process that used no CPU (a starved one, on a loaded machine) has not spent its budget, however long it waited
    monkeypatch.setattr(time, "process_time", lambda: 0.0)
    waited = discover_circuit(model, ds, [(2, 1), (2, 3)], max_seconds=1e-9, **args)
    assert waited.settings.stopped == "depth budget" and any(n.depth == 2 for n in waited.nodes)
