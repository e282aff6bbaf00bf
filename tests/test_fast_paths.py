"""Every fast path equals the plain computation: logits and hooked activations within 1e-5.

The fast paths run the shared few-shot prefix once (``mathcircuits.models.forward.prefix``)
and compute vocabulary logits only where they are read. Each test runs the
plain forward on the same inputs and compares, on tiny Llama (GQA) and GPT-2;
one slow test repeats the check on the embedded model.
"""

from __future__ import annotations

import pytest
import torch

from mathcircuits.ablation import KnockoutScorer, ablated_model, head_means
from mathcircuits.analysis import attention_by_role
from mathcircuits.analysis.roles import role_masks, role_shares
from mathcircuits.data import GenerationConfig, generate_pairs, score_pairs
from mathcircuits.data.batching import padded_groups
from mathcircuits.finetune.validation import score_arithmetic
from mathcircuits.models import HFForward, PrefixRunner, hooks, run_from_layer
from mathcircuits.models.forward.prefix import repeat_cache, shared_prefix_len
from mathcircuits.models.tiny import TINY_FAMILIES, tiny_model
from mathcircuits.patching.cache import last_position_caches

from helpers import FAST_FAMILIES, tiered

TOL = 1e-5
MODELS = ["tiny_llama", "tiny_gpt2"]


def _pairs(model, template_sets, n=4):
    config = GenerationConfig(operations=("add",), template_ids=("add_eq_1", "add_st_1"), n_per_template=n)
    return generate_pairs(model.tokenizer, template_sets, config)


def _batch(ds, column="tokens"):
    """The largest batch of one template and one length (rows that share their prefix)."""
    return max((t for _, t in ds.prompt_batches(64, "cpu", column)), key=lambda t: t.shape[0])


def test_shared_prefix_len():
    t = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 9, 5], [1, 2, 3, 4, 7]])
    assert shared_prefix_len(t) == 3
    assert shared_prefix_len(t, limit=2) == 2
    same = torch.tensor([[1, 2, 3], [1, 2, 3]])
    assert shared_prefix_len(same) == 2  # the suffix keeps at least one position


@pytest.mark.parametrize("model_name", MODELS)
def test_prefix_logits_equal_plain(request, template_sets, model_name):
    model = request.getfixturevalue(model_name)
    toks = _batch(_pairs(model, template_sets))
    assert toks.shape[0] > 1 and shared_prefix_len(toks) >= 4  # the fast path is really taken
    plain = model.bridge(toks)
    for start in (toks.shape[1] - 1, toks.shape[1] - 3):
        fast = PrefixRunner(model.bridge).logits_from(toks, start)
        assert fast.shape == plain[:, start:].shape
        assert (fast - plain[:, start:]).abs().max() <= TOL


@pytest.mark.parametrize("model_name", MODELS)
@pytest.mark.parametrize("scope", ["all", "last"])
def test_ablated_forward_equals_plain(request, template_sets, model_name, scope):
    model = request.getfixturevalue(model_name)
    ds = _pairs(model, template_sets)
    means = head_means(model, ds)
    heads = [(0, 1), (1, 0), (1, 3)]
    runner = ablated_model(model, heads, means, scope)
    toks = _batch(ds)
    plain = runner(toks)  # the plain forward with the same hooks on every position
    fast = runner.logits_from(toks, toks.shape[1] - 2)
    assert (fast - plain[:, -2:]).abs().max() <= TOL
    assert (plain - model.bridge(toks)).abs().max() > 1e-4  # the ablation changed something


@pytest.mark.parametrize("model_name", MODELS)
@torch.no_grad()
def test_run_from_layer_equals_full_forward(request, template_sets, model_name):
    """Blocks k… alone, fed the clean residual entering block k, give the full forward's logits and z."""
    model = request.getfixturevalue(model_name)
    toks = _batch(_pairs(model, template_sets))
    p, last = shared_prefix_len(toks), model.spec.n_layers - 1

    def zero_head(act, hook):
        act = act.clone()
        act[:, :, 1] = 0.0
        return act

    seen = {}

    def grab(act, hook):
        seen["z"] = act.clone()

    ablate = [(hooks.z(last), zero_head), (hooks.z(last), grab)]
    plain = model.bridge.run_with_hooks(toks, fwd_hooks=ablate)[:, p:]
    z_plain = seen.pop("z")[:, p:]
    _, one = model.bridge(toks[:1, :p], return_type="logits_and_cache")
    model.bridge.run_with_hooks(
        toks[:, p:],
        fwd_hooks=[(hooks.resid_pre(last), lambda act, hook: seen.update(resid=act.clone()))],
        past_key_values=repeat_cache(one, len(toks)),
    )
    run_from_layer(model.bridge, seen["resid"], last, repeat_cache(one, len(toks)))  # its run-time check runs first
    called = []
    handle = model.bridge.blocks[0].register_forward_hook(lambda *a: called.append(0))  # block 0 must not run
    try:
        fast = run_from_layer(model.bridge, seen["resid"], last, repeat_cache(one, len(toks)), ablate)
    finally:
        handle.remove()
    assert called == [] and len(model.bridge.blocks) == model.spec.n_layers  # skipped, and the block list restored
    first = (hooks.resid_pre(0), lambda act, hook: None)  # a hook of a block that does not run would never fire
    with pytest.raises(ValueError, match="never fire"):
        run_from_layer(model.bridge, seen["resid"], last, repeat_cache(one, len(toks)), [*ablate, first])
    assert (fast - plain).abs().max() <= TOL
    assert (seen["z"] - z_plain).abs().max() <= TOL
    assert (plain - model.bridge(toks)[:, p:]).abs().max() > 1e-4  # the ablation changed something


KNOCKOUTS = [(m, a, s) for s in ("all", "last") for a in ("mean", "position_mean", "resample") for m in MODELS]
# the fast loop: every ablation on one model, the last-position scope once, and the other model once
FAST_KNOCKOUTS = [("tiny_llama", "mean", "all")]  # the paper's ablation; the rest in the slow tier


@pytest.mark.parametrize(("model_name", "ablation", "scope"), tiered(KNOCKOUTS, FAST_KNOCKOUTS))
def test_knockout_scorer_fast_equals_plain(request, template_sets, model_name, ablation, scope):
    """Prefix reuse + resuming at the lowest ablated layer = one full hooked forward per batch (logits ≤ 1e-5)."""
    model = request.getfixturevalue(model_name)
    ds = _pairs(model, template_sets, n=6)
    scorer = KnockoutScorer(model, ds, ablation, scope=scope, seed=3, batch_size=4)
    assert any(g.shared >= 4 for g in scorer.groups)  # the prefix path is really taken
    clean = scorer.logits([])
    for heads in ([(1, 0), (1, 3)], [(0, 1), (1, 3)], [(model.spec.n_layers - 1, 2)]):
        fast, plain = scorer.logits(heads), scorer.logits(heads, fast=False)
        assert max(float((a - b).abs().max()) for a, b in zip(fast, plain)) <= TOL, heads
    changed = max(float((a - b).abs().max()) for a, b in zip(scorer.logits([(0, 1), (1, 3)]), clean))
    assert changed > 1e-4  # the knockout did something
    once = KnockoutScorer(model, ds, ablation, scope=scope, seed=3, batch_size=4, reuse_clean=False)
    for heads in ([], [(1, 0), (1, 3)]):  # a single scoring runs every block of the suffix instead
        fast, plain = once.logits(heads), scorer.logits(heads, fast=False)
        assert max(float((a - b).abs().max()) for a, b in zip(fast, plain)) <= TOL, heads
    assert scorer.score([(0, 1)]) == scorer.score([(0, 1)], fast=False)


def test_knockout_on_a_bridge_without_start_at_layer_runs_every_block(tiny_llama, template_sets, monkeypatch):
    """TransformerLens 3.9's bridge raises NotImplementedError for start_at_layer: same numbers, every block run."""
    ds = _pairs(tiny_llama, template_sets, n=6)
    scorer = KnockoutScorer(tiny_llama, ds, "position_mean", seed=3, batch_size=4)
    heads = [(1, 0), (1, 3)]
    plain = scorer.logits(heads, fast=False)
    bridge = tiny_llama.bridge
    original = bridge.run_with_hooks
    calls = []

    def no_mid_start(*args, start_at_layer=None, **kwargs):
        calls.append(start_at_layer)
        if start_at_layer is not None:
            raise NotImplementedError("start_at_layer is not supported in TransformerBridge.")
        return original(*args, **kwargs)

    monkeypatch.setattr(bridge, "run_with_hooks", no_mid_start)
    fresh = KnockoutScorer(tiny_llama, ds, "position_mean", seed=3, batch_size=4)
    fast = fresh.logits(heads)
    assert max(float((a - b).abs().max()) for a, b in zip(fast, plain)) <= TOL
    assert 1 in calls  # it tried to resume at layer 1, then ran every block
    calls.clear()
    again = fresh.logits(heads)
    assert max(float((a - b).abs().max()) for a, b in zip(again, plain)) <= TOL
    assert calls and set(calls) == {None}  # and does not try again


@pytest.mark.parametrize("model_name", MODELS)
def test_head_means_equal_plain(request, template_sets, model_name):
    model = request.getfixturevalue(model_name)
    ds = _pairs(model, template_sets)
    spec = model.spec
    total = torch.zeros(spec.n_layers, spec.n_heads, spec.d_head, dtype=torch.float64)
    count = 0
    for seq in ds.cf_tokens:  # one plain forward per prompt
        _, cache = model.bridge.run_with_cache(torch.tensor([seq]), names_filter=lambda n: n.endswith("hook_z"))
        for layer in range(spec.n_layers):
            total[layer] += cache[hooks.z(layer)][0].double().sum(0)
        count += len(seq)
    assert (head_means(model, ds).means - (total / count).float()).abs().max() <= TOL


@pytest.mark.parametrize("model_name", MODELS)
def test_score_pairs_equal_plain(request, template_sets, model_name):
    model = request.getfixturevalue(model_name)
    ds = _pairs(model, template_sets, n=6)
    fast = score_pairs(model, ds)  # a HookedModel has logits_from: the prefix-cached path
    plain = score_pairs(lambda t: model.bridge(t), ds)
    assert fast.correct == plain.correct and fast.first_correct == plain.first_correct
    assert max(abs(a - b) for a, b in zip(fast.p_answer, plain.p_answer)) <= TOL


@pytest.mark.parametrize("model_name", tiered(MODELS, ["tiny_llama"]))
def test_right_padded_scoring_equals_one_row_at_a_time(request, template_sets, model_name):
    model = request.getfixturevalue(model_name)
    # one-digit operands: the prompts have one length, the answers one or two tokens, so the scored
    # sequences (prompt + answer[:-1]) differ in length and a one-token answer is read mid-batch
    config = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), operand_range=(1, 9), n_per_template=16)
    ds = generate_pairs(model.tokenizer, template_sets, config)
    lengths = [len(t) + len(a) - 1 for t, a in zip(ds.tokens, ds.answer_tokens)]
    assert len(set(lengths)) > 1 and len(padded_groups(lengths, 64, list(ds.template_ids))) == 1  # one mixed batch
    every = [(l, h) for l in range(model.spec.n_layers) for h in range(model.spec.n_heads)]
    runners = {
        "prefix-cached": model,
        "plain": lambda t: model.bridge(t),
        # a hook at the last position must not land on padding: such a runner keeps equal-length batches
        "hooked, last position": ablated_model(model, every, head_means(model, ds), "last"),
    }
    for name, runner in runners.items():
        batched, single = score_pairs(runner, ds), score_pairs(runner, ds, batch_size=1)
        assert batched.correct == single.correct, name
        assert max(abs(a - b) for a, b in zip(batched.p_answer, single.p_answer)) <= TOL, name


@pytest.mark.parametrize("model_name", MODELS)
def test_last_position_caches_equal_plain(request, template_sets, model_name):
    model = request.getfixturevalue(model_name)
    ds = _pairs(model, template_sets)
    toks, cf = _batch(ds), _batch(ds, "cf_tokens")
    n = min(len(toks), len(cf))
    toks, cf = toks[:n], cf[:n]
    fast = last_position_caches(model, toks, cf)
    plain = last_position_caches(model, toks, cf, share_prefix=False)
    assert (fast.logits - plain.logits).abs().max() <= TOL
    for side in ("ref", "cf"):
        a, b = getattr(fast, side), getattr(plain, side)
        assert a.keys() == b.keys() and len(a) > 0
        for name in a:
            assert (a[name] - b[name]).abs().max() <= TOL, name


@pytest.mark.parametrize("model_name", MODELS)
def test_attention_rows_equal_plain(request, template_sets, model_name):
    model = request.getfixturevalue(model_name)
    ds = _pairs(model, template_sets)
    heads = [(0, 0), (1, 2), (1, 1)]
    fast = attention_by_role(model, ds, heads)
    for i, seq in enumerate(ds.tokens):  # one plain forward per prompt: the last query row of each head
        _, cache = model.bridge.run_with_cache(torch.tensor([seq]), names_filter=lambda n: n.endswith("hook_pattern"))
        rows = torch.stack([cache[hooks.pattern(layer)][0, head, -1] for layer, head in heads])
        mask = role_masks(len(seq), ds.prefix_len[i], ds.pos_a[i], ds.pos_b[i], ds.pos_op[i])
        assert (fast.shares[i] - role_shares(rows, mask)).abs().max() <= TOL


@pytest.mark.slow
def test_embedded_fast_paths_equal_plain(embedded, template_sets):
    torch.set_num_threads(1)
    ds = generate_pairs(
        embedded.tokenizer,
        template_sets,
        GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=8),
    )
    toks, cf = _batch(ds), _batch(ds, "cf_tokens")
    n = min(len(toks), len(cf))
    fast = last_position_caches(embedded, toks[:n], cf[:n])
    plain = last_position_caches(embedded, toks[:n], cf[:n], share_prefix=False)
    assert (fast.logits - plain.logits).abs().max() <= TOL
    for name in fast.ref:
        assert (fast.ref[name] - plain.ref[name]).abs().max() <= TOL, name
    for name in fast.cf:
        assert (fast.cf[name] - plain.cf[name]).abs().max() <= TOL, name
    scored_fast = score_pairs(embedded, ds)
    scored_plain = score_pairs(lambda t: embedded.bridge(t), ds)
    assert scored_fast.correct == scored_plain.correct
    assert max(abs(a - b) for a, b in zip(scored_fast.p_answer, scored_plain.p_answer)) <= TOL


@pytest.mark.parametrize("family", tiered(sorted(TINY_FAMILIES), FAST_FAMILIES))
def test_hf_prefix_scoring_equals_plain(template_sets, family):
    """A plain HF model (e.g. a fine-tuned one) scored through PrefixRunner(HFForward) equals its full forward."""
    hf, tok = tiny_model(family)
    config = GenerationConfig(operations=("add",), template_ids=("add_eq_1", "add_st_1"), n_per_template=6)
    ds = generate_pairs(tok, template_sets, config)
    fast = score_pairs(PrefixRunner(HFForward(hf)), ds)
    plain = score_pairs(lambda t: hf(t).logits, ds, batch_size=1)
    assert fast.correct == plain.correct and fast.first_correct == plain.first_correct
    assert max(abs(a - b) for a, b in zip(fast.p_answer, plain.p_answer)) <= TOL
    assert score_arithmetic(hf, ds) == [int(c) for c in plain.correct]
    with pytest.raises(ValueError, match="no hook points"):
        HFForward(hf).run_with_hooks(torch.tensor(ds.tokens[:1]), fwd_hooks=[("x", None)])


@pytest.mark.parametrize("start", [1, 2, 3])
def test_resuming_mid_network_keeps_each_blocks_attention_type(start):
    """Gemma 3 mixes sliding and full attention layers, each with its own rotary base, looked up by block index:
    a forward resumed at block ``start`` must still give each block its own type (as Gemma 3 270M: L5, L11, L17)."""
    from mathcircuits.models import from_hf

    types = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
    model = from_hf(*tiny_model("gemma3", n_layers=4, layer_types=types))
    toks = torch.randint(5, 60, (1, 9), generator=torch.Generator().manual_seed(0)).repeat(2, 1)
    toks[1, 6:] = torch.tensor([7, 8, 9])  # a shared prefix, then rows that differ
    name = hooks.resid_pre(start)
    with torch.no_grad():
        full, cache = model.bridge.run_with_cache(toks, names_filter=lambda n: n == name)
        resumed = run_from_layer(model.bridge, cache[name], start)
        _, prefix = model.bridge(toks[:1, :4], return_type="logits_and_cache")  # and on a prefix KV cache
        suffix = run_from_layer(model.bridge, cache[name][:, 4:], start, repeat_cache(prefix, 2))
    assert (resumed - full).abs().max() <= TOL
    assert (suffix - full[:, 4:]).abs().max() <= TOL
    assert model.hf_model.config.layer_types == types  # restored after the call
