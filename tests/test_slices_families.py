"""Head slices on every model family: each slice changes only its own head, and an adapter merges exactly.

For each tiny random family model (3 layers, 4 heads of 16, 2 KV heads where the family has GQA) we
perturb one role's slice of head 2 in layer 1 and run the TransformerLens bridge: a query slice must
change only head 2's ``hook_z``, a key or value slice only the heads of head 2's KV group (the whole
group under GQA), an output slice no ``hook_z`` of its layer but exactly head 2's contribution to the
output projection. Families whose q/k slices are not head-local (OLMo 2) are refused, and the test
shows why. Fast tier: one bridge boot per family.
"""

from __future__ import annotations

import contextlib
import copy
import io

import pytest
import torch
from transformer_lens.model_bridge import TransformerBridge

from mathcircuits.finetune import LAYOUTS, HeadSliceAdapter, SliceError, head_slices
from mathcircuits.finetune.layouts import model_facts, resolve_layout
from mathcircuits.models.tiny import TINY_FAMILIES, tiny_model

from helpers import FAST_FAMILIES, tiered

LAYER, HEAD = 1, 2
FAMILIES = sorted(TINY_FAMILIES)


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.set_num_threads(1)
    torch.manual_seed(0)


def _tokens() -> torch.Tensor:
    return torch.randint(3, 60, (2, 7), generator=torch.Generator().manual_seed(0))


def _boot(hf_model, tok, family):
    with contextlib.redirect_stdout(io.StringIO()):
        bridge = TransformerBridge.boot_transformers(family, hf_model=hf_model, tokenizer=tok, device="cpu")
        bridge.enable_compatibility_mode(no_processing=True)
    return bridge.eval()


def _z(bridge, x) -> dict[int, torch.Tensor]:
    with torch.no_grad():
        _, cache = bridge.run_with_cache(x, names_filter=lambda n: n.endswith("attn.hook_z"))
    return {layer: cache[f"blocks.{layer}.attn.hook_z"] for layer in (0, 1)}


def _changed_heads(clean: torch.Tensor, pert: torch.Tensor) -> list[int]:
    diff = (clean - pert).abs().amax(dim=(0, 1, 3))
    return [h for h, v in enumerate(diff.tolist()) if v > 1e-6]


def _perturb(model, slices, scale: float = 0.5) -> dict[str, torch.Tensor]:
    """Add noise to every slice of ``slices`` in place; returns the noise per parameter name."""
    gen = torch.Generator().manual_seed(3)
    noise = {}
    with torch.no_grad():
        for s in slices.slices:
            noise[s.name] = torch.randn(s.slice_shape, generator=gen) * scale
            model.get_parameter(s.name).index_add_(s.axis, s.indices(), noise[s.name])
    return noise


def _z_of(hf, tok, family, slices=None) -> dict[int, torch.Tensor]:
    """hook_z of layers 0 and 1 of a (perturbed) copy of ``hf``, booted fresh: some bridges (GPT-NeoX) split
    fused weights into their own tensors at boot, so edits must come before it."""
    model = copy.deepcopy(hf)
    if slices is not None:
        _perturb(model, slices)
    return _z(_boot(model, tok, family), _tokens())


def test_every_tiny_family_has_a_layout():
    models = {TINY_FAMILIES[f][0] for f in FAMILIES}
    assert models <= set(LAYOUTS), sorted(models - set(LAYOUTS))


@pytest.mark.parametrize("family", tiered(FAMILIES, FAST_FAMILIES))
def test_head_slices_change_only_their_own_heads_z(family):
    hf, tok = tiny_model(family)
    facts, layout = model_facts(hf), resolve_layout(hf)
    group = facts.n_heads // facts.n_kv_heads
    kv_heads = list(range(HEAD // group * group, (HEAD // group + 1) * group))
    assert (len(kv_heads) == 2) == (family not in ("gpt2", "gpt_neox_parallel", "gpt_neox_sequential", "gptj", "phi"))
    clean = _z_of(hf, tok, family)
    expected = {"q": [HEAD], "k": kv_heads, "v": kv_heads, "o": []}
    for role in ("q", "k", "v", "o"):
        if role in layout.not_head_local:
            continue
        slices = head_slices(hf, [(LAYER, HEAD)], roles=(role,))
        assert {r for s in slices.slices for r in s.roles} == {role}
        pert = _z_of(hf, tok, family, slices)
        assert _changed_heads(clean[0], pert[0]) == [], (family, role)
        assert _changed_heads(clean[LAYER], pert[LAYER]) == expected[role], (family, role)
    # the output slice is exactly head 2's share of the output projection: Δout = z_2 · ΔW
    o_slices = head_slices(hf, [(LAYER, HEAD)], roles=("o",))
    (w_slice,) = o_slices.slices
    o_module = hf.get_submodule(w_slice.module)
    z = torch.randn(2, 5, facts.n_heads * facts.d_head, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        before = o_module(z)
        dw = _perturb(hf, o_slices)[w_slice.name]
        after = o_module(z)
    z_head = z.unflatten(-1, (facts.n_heads, facts.d_head))[..., HEAD, :]
    torch.testing.assert_close(
        after - before, z_head @ (dw if w_slice.weight_layout == "in_out" else dw.T), atol=1e-5, rtol=1e-4
    )


@pytest.mark.parametrize("family", tiered(FAMILIES, FAST_FAMILIES))
def test_precise_sft_adapter_merges_to_its_forward(family):
    hf, _ = tiny_model(family)
    layout = resolve_layout(hf)
    roles = tuple(r for r in ("q", "k", "v", "o") if r not in layout.not_head_local)
    adapter = HeadSliceAdapter(hf, head_slices(hf, [(0, 1), (1, 2), (1, 3)], mlps=[1], roles=roles))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, d in adapter.named_deltas():
            d.copy_(torch.randn(d.shape, generator=gen) * 0.1)
        x = _tokens()
        tuned = adapter(x).logits
        base = adapter.base_model(x).logits  # hooks still on: the same as tuned
        merged = adapter.merge_and_unload()(x).logits
    torch.testing.assert_close(base, tuned, atol=0, rtol=0)
    assert (merged - tuned).abs().max() <= 1e-5
    with torch.no_grad():
        untuned = tiny_model(family)[0](x).logits
    assert (merged - untuned).abs().max() > 1e-3  # the deltas did something


def test_olmo2_query_and_key_slices_are_refused_because_they_are_not_head_local():
    hf, tok = tiny_model("olmo2")
    with pytest.raises(SliceError, match=r"not head-local.*q_norm.*Fix: head_slices\(model, key, roles=\('v', 'o'\)\)"):
        head_slices(hf, [(LAYER, HEAD)])
    with pytest.raises(SliceError, match="not head-local"):
        head_slices(hf, [(LAYER, HEAD)], roles=("k",))
    # why: q_norm normalises all heads' queries together, so head 2's query rows move every head's z
    clean = _z_of(hf, tok, "olmo2")
    d = model_facts(hf).d_head
    with torch.no_grad():
        hf.get_parameter(f"model.layers.{LAYER}.self_attn.q_proj.weight")[HEAD * d : (HEAD + 1) * d] += 0.5
    assert _changed_heads(clean[LAYER], _z_of(hf, tok, "olmo2")[LAYER]) == [0, 1, 2, 3]


def test_unknown_family_is_refused_with_what_is_missing():
    from transformers import BloomConfig, BloomForCausalLM

    bloom = BloomForCausalLM(BloomConfig(vocab_size=20, hidden_size=16, n_layer=1, n_head=2))
    with pytest.raises(SliceError, match=r"family 'bloom' .*no head-slice layout.*Fix: add a row"):
        head_slices(bloom, [(0, 1)])


def test_a_model_inside_a_bridge_is_refused_with_the_plain_copy_as_fix():
    hf, tok = tiny_model("llama")
    _boot(hf, tok, "llama")
    with pytest.raises(SliceError, match=r"inside a TransformerBridge.*plain_hf_model\(\)"):
        head_slices(hf, [(0, 1)])
