"""The family matrix: on every tiny model family, each method is exact or refused with a clear error.

Tiny random models (3 layers, 4 heads of 16, 2 KV heads where the family has
GQA, hidden 64) are built offline from HF configs (``models.tiny``), loaded
through ``load_model("tiny-<family>")``, and checked against definitions that
need no knowledge of the block's shape: exact path patching against one hooked
forward per sender, the readout against the model's own logits, the knockout
hook against ``hook_z`` and the attention output, the MLP probes' logit lens
against the model's output.
"""

import dataclasses
from functools import cache

import pytest
import torch

from mathcircuits.ablation import head_means
from mathcircuits.ablation.hooks import mean_ablation_hooks
from mathcircuits.analysis import attention_by_role, mlp_probes
from mathcircuits.data import GenerationConfig, generate_pairs, load_templates
from mathcircuits.models import UnsupportedFamilyError, hooks, load_hf_model, load_model
from mathcircuits.models.families import FAMILIES, block_structure
from mathcircuits.models.forward.changes import attn_pre_norm_name
from mathcircuits.models.forward.readout import readout
from mathcircuits.models.tiny import TINY_FAMILIES, tiny_model
from mathcircuits.patching import path_patch
from mathcircuits.patching.cache import last_position_caches
from mathcircuits.patching.metrics import METRICS

from helpers import FAST_FAMILIES, tiered

FAMILIES_UNDER_TEST = sorted(TINY_FAMILIES)
# one family of each block shape: sequential+GQA, sandwich (pre+post norms), post norms only,
# parallel, parallel with one shared norm
SHAPES = ["llama", "gemma2", "olmo2", "gpt_neox_parallel", "phi"]
QUICK_SHAPES = ["llama", "gpt_neox_parallel"]  # a sequential and a parallel block; the others in the slow tier


@cache
def _model(family):
    return load_model(f"tiny-{family.replace('_', '-')}")


@cache
def _pairs(family):
    model = _model(family)
    cfg = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=3)  # one batch of 38 tokens
    return generate_pairs(model.tokenizer, load_templates(), cfg)


@pytest.mark.slow
def test_every_tiny_family_is_described():
    described = {block_structure(_model(f)).family for f in FAMILIES_UNDER_TEST}
    assert described <= set(FAMILIES)
    structures = [block_structure(_model(f)) for f in SHAPES]
    shapes = {(s.parallel, s.attn_out_norm is not None, s.mlp_in_norm) for s in structures}
    assert len(shapes) == len(SHAPES)  # the shape families really differ


@pytest.mark.parametrize("family", tiered(FAMILIES_UNDER_TEST, FAST_FAMILIES))
def test_bridge_equals_hf(family):
    hooked = _model(family)
    hf, _ = load_hf_model(f"tiny-{family}")
    tokens = hooked.to_tokens(["3 + 5 = ", "7 - 2 = "])
    with torch.no_grad():
        assert (hooked(tokens) - hf(tokens).logits).abs().max() < 1e-5
    # tiny-gpt2 and tiny-llama keep their historical builders (2 and 3 layers); the others are tiny_model's
    assert (hooked.spec.n_heads, hooked.spec.d_model) == (4, 64)
    assert hooked.spec.n_layers == hf.config.num_hidden_layers == (2 if family == "gpt2" else 3)


@pytest.mark.parametrize("family", tiered(FAMILIES_UNDER_TEST, FAST_FAMILIES))
def test_readout_of_the_final_residual_is_the_models_output(family):
    """Final norm, unembedding and (Gemma 2) logit soft cap, rebuilt from the last residual, give the model's logits."""
    model, ds = _model(family), _pairs(family)
    tokens, cf = torch.tensor(ds.tokens[:2]), torch.tensor(ds.cf_tokens[:2])
    answer = torch.tensor(ds.answer_token[:2])
    cache_ = last_position_caches(model, tokens, cf)
    final = cache_.ref[hooks.resid_post(model.spec.n_layers - 1)]
    with torch.no_grad():
        got = readout(model, cache_.structure, final, answer, need_probs=True)
    want = cache_.clean(answer, need_probs=True)
    assert (got.logit - want.logit).abs().max() < 1e-5 and (got.prob - want.prob).abs().max() < 1e-6


@pytest.mark.parametrize("family", tiered(FAMILIES_UNDER_TEST, FAST_FAMILIES))
def test_exact_equals_reference(family):
    model, ds = _model(family), _pairs(family)
    fast = path_patch(model, ds, metric="logit_diff", keep_per_pair=True)
    ref = path_patch(model, ds, metric="logit_diff", method="reference", keep_per_pair=True)
    assert (fast.per_pair_heads - ref.per_pair_heads).abs().max() <= 1e-4
    assert (fast.per_pair_mlps - ref.per_pair_mlps).abs().max() <= 1e-4
    assert ref.per_pair_heads.abs().max() > 1e-2  # the patches change the answer logit: the equality is not 0 = 0


@pytest.mark.parametrize("family", tiered(SHAPES, QUICK_SHAPES))
def test_exact_equals_reference_all_metrics(family):
    model, ds = _model(family), _pairs(family)
    with torch.no_grad():
        logits = model(torch.tensor(ds.tokens))[:, -1]
    clean = logits.gather(1, torch.tensor(ds.answer_token)[:, None])  # [pair, 1]
    for name in ("relative_logit", "prob_change", "answer_logprob"):
        # relative_logit without its guard: a random model's clean logits are near 0, where the guard refuses pairs
        metric = dataclasses.replace(METRICS[name], min_clean=None)
        fast = path_patch(model, ds, metric=metric, keep_per_pair=True)
        ref = path_patch(model, ds, metric=metric, method="reference", keep_per_pair=True)
        d_heads, d_mlps = fast.per_pair_heads - ref.per_pair_heads, fast.per_pair_mlps - ref.per_pair_mlps
        if name == "relative_logit":  # back to logit units: a random model's clean logit can be near 0
            d_heads, d_mlps = d_heads * clean[:, :, None].abs(), d_mlps * clean.abs()
            assert d_heads.abs().max() <= 1e-4 and d_mlps.abs().max() <= 1e-4
        elif name == "answer_logprob":  # every answer token, teacher-forced: log-probabilities
            assert d_heads.abs().max() <= 1e-4 and d_mlps.abs().max() <= 1e-4
            assert (fast.per_pair_total - ref.per_pair_total).abs().max() <= 1e-4
        else:
            assert d_heads.abs().max() <= 1e-6 and d_mlps.abs().max() <= 1e-6
        assert ref.per_pair_heads.abs().max() > 1e-5


@pytest.mark.parametrize("family", tiered(SHAPES, QUICK_SHAPES))
def test_attribution_runs_and_ranks_like_exact(family):
    from mathcircuits.patching import compare_rankings

    model, ds = _model(family), _pairs(family)
    exact = path_patch(model, ds, metric="logit_diff")
    approx = path_patch(model, ds, metric="logit_diff", method="attribution")
    assert torch.isfinite(approx.head_effects).all() and torch.isfinite(approx.mlp_effects).all()
    assert compare_rankings(approx, exact, k=3)["spearman_heads"] > 0.5


@pytest.mark.parametrize("family", tiered(FAMILIES_UNDER_TEST, FAST_FAMILIES))
def test_knockout_hook_changes_exactly_the_ablated_heads(family):
    model, ds = _model(family), _pairs(family)
    means = head_means(model, ds)
    toks = torch.tensor(ds.tokens[:2])
    structure = block_structure(model)
    attn_name = attn_pre_norm_name(structure, 1) or hooks.attn_out(1)  # attention output before any output norm
    names = [hooks.z(1), attn_name]
    seen, clean = {}, {}

    def grab(store):
        return [(n, (lambda act, hook, n=n: store.__setitem__(n, act.detach().clone()))) for n in names]

    with torch.no_grad():
        model.bridge.run_with_hooks(toks, fwd_hooks=grab(clean))
        model.bridge.run_with_hooks(toks, fwd_hooks=mean_ablation_hooks(model, [(1, 2)], means, "all") + grab(seen))
    z, z0 = seen[hooks.z(1)], clean[hooks.z(1)]
    assert torch.equal(z[:, :, [0, 1, 3]], z0[:, :, [0, 1, 3]])
    assert torch.allclose(z[:, :, 2], means.means[1, 2].expand_as(z[:, :, 2]))
    assert not torch.allclose(z[:, :, 2], z0[:, :, 2])
    # the edit reaches the model: attention's output moves by exactly (mean − z) W_O of head 2
    expected = (z[:, :, 2] - z0[:, :, 2]) @ model.bridge.W_O[1, 2]
    torch.testing.assert_close(seen[attn_name] - clean[attn_name], expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", SHAPES)
def test_mlp_probes_lens_after_the_last_layer_is_the_models_output(family):
    model, ds = _model(family), _pairs(family)
    res = mlp_probes(model, ds)
    with torch.no_grad():
        logits = torch.cat([model(torch.tensor([t]))[:, -1] for t in ds.tokens])
    ans = torch.tensor(ds.answer_token)
    assert torch.equal(res.lens_rank[:, -1], (logits > logits.gather(1, ans[:, None])).sum(1).float())
    torch.testing.assert_close(res.lens_prob[:, -1], torch.softmax(logits, -1).gather(1, ans[:, None])[:, 0])
    shares = attention_by_role(model, ds, [(0, 1), (2, 3)]).shares
    assert torch.allclose(shares.sum(-1), torch.ones_like(shares.sum(-1)), atol=1e-5)


def _saved(tmp_path, model, tok):
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    return load_model(str(tmp_path))


def test_unknown_family_and_unsupported_flag_are_refused(tmp_path):
    """Cohere (parallel block, shared norm, scaled logits) loads in the bridge but is not in the table: refused."""
    from transformers import AutoConfig, AutoModelForCausalLM

    tok = _model("llama").tokenizer
    cfg = AutoConfig.for_model(
        "cohere",
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    cohere = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    cohere.config.architectures = [type(cohere).__name__]
    model = _saved(tmp_path / "cohere", cohere, tok)
    pairs = _pairs("llama")
    for method in ("exact", "attribution"):
        with pytest.raises(UnsupportedFamilyError, match="family 'cohere' .* is not in .*FAMILIES"):
            path_patch(model, pairs, method=method)
    with pytest.raises(UnsupportedFamilyError, match="'cohere'"):
        mlp_probes(model, pairs)
    ref = path_patch(model, pairs, method="reference", senders=("mlps",))  # the definition needs no table
    assert torch.isfinite(ref.mlp_effects).all()
    hf, tok = tiny_model("stablelm", use_parallel_residual=True)
    with pytest.raises(UnsupportedFamilyError, match="use_parallel_residual=True"):
        path_patch(_saved(tmp_path / "stablelm", hf, tok), _pairs("stablelm"))


def test_tiny_model_overrides_and_unknown_family():
    model, _ = tiny_model("llama", n_layers=2, n_kv_heads=4)
    assert model.config.num_hidden_layers == 2 and model.config.num_key_value_heads == 4
    a, _ = tiny_model("gpt-neox", seed=1)
    assert a.config.use_parallel_residual is True
    with pytest.raises(KeyError, match="no tiny model of family 'bert'"):
        tiny_model("bert")
