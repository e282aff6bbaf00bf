"""Models users already hold: an HF model or a TransformerBridge, wrapped without copying weights.

The notebook-style tests take a user's own ``AutoModelForCausalLM`` (built from a config, as in a notebook)
and a user's own ``TransformerBridge`` through path patching, knockout, attention by role and precise SFT.
Also: ``device_map`` passes through to accelerate, and processed bridges are refused.

The TransformerLens 3.x test runs only where TL 3.x is installed (a second environment; see
docs/howto/your-own-model-or-templates.md): TL 3.x and 4.x share a package name.
"""

from __future__ import annotations

import contextlib
import io
import random

import pytest
import torch
from transformer_lens.model_bridge import TransformerBridge
from transformers import AutoConfig, AutoModelForCausalLM

from mathcircuits.ablation import knockout_curve
from mathcircuits.analysis import attention_by_role
from mathcircuits.analysis.roles import role_masks
from mathcircuits.data import GenerationConfig, generate_pairs, load_templates, score_pairs
from mathcircuits.finetune import SFTConfig, build_sft_dataset, train_sft
from mathcircuits.models import HookedModel, from_bridge, from_hf, load_hf_model, load_model, wrap
from mathcircuits.models.tiny import tiny_tokenizer
from mathcircuits.patching import path_patch, select_key_components

from helpers import unchecked


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)
    torch.manual_seed(0)


def _users_hf_model(model_type: str = "qwen2"):
    """What a user does in a notebook: a config, a model from it, a tokenizer they already have."""
    tok = tiny_tokenizer()
    kw = {
        "vocab_size": len(tok),
        "pad_token_id": tok.pad_token_id,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
    }
    if model_type == "gpt2":
        kw.update(n_embd=64, n_layer=3, n_head=4, n_positions=256)
    else:
        kw.update(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
        )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **kw)).eval()
    with torch.no_grad():
        for p in model.parameters():  # HF's 0.02 init makes attention near uniform: widen it
            if p.ndim >= 2:
                p.mul_(20.0 / p.shape[-1] ** 0.5)
    return model, tok


def _users_bridge():
    hf, tok = _users_hf_model("gpt2")
    with contextlib.redirect_stdout(io.StringIO()):
        return TransformerBridge.boot_transformers("my-gpt2", hf_model=hf, tokenizer=tok, device="cpu")


def _logits(model, x):
    with torch.no_grad():
        return model(x).logits


def test_from_hf_shares_the_weights_and_keeps_the_logits():
    hf, tok = _users_hf_model()
    ref, _ = _users_hf_model()
    q = hf.model.layers[1].self_attn.q_proj.weight
    hm = from_hf(hf, tok)
    assert isinstance(hm, HookedModel) and hm.spec.n_kv_heads == 2 and hm.spec.architecture == "Qwen2ForCausalLM"
    assert any(p is q for p in hm.bridge.parameters())  # no copy: the bridge holds the user's tensor
    x = torch.randint(3, 60, (2, 9))
    torch.testing.assert_close(hm(x), _logits(ref, x), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        q[:16] += 1.0  # an edit to the user's tensor is seen by the hooked model
    assert (hm(x) - _logits(ref, x)).abs().max() > 1e-3
    with pytest.raises(ValueError, match="already wrapped by a TransformerBridge.*from_bridge"):
        from_hf(hm.hf_model, tok)


def test_from_hf_needs_the_tokenizer_and_an_hf_model():
    hf, _ = _users_hf_model()
    with unchecked(), pytest.raises(ValueError, match="needs the tokenizer.*Fix: from_hf"):
        from_hf(hf, None)
    with unchecked(), pytest.raises(TypeError, match="not an HF PreTrainedModel"):
        from_hf(torch.nn.Linear(2, 2), tiny_tokenizer())
    with unchecked(), pytest.raises(TypeError, match="wrap got a torch.nn.modules.linear.Linear"):
        wrap(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="model"):  # under a type checker the annotation refuses it first
        from_hf(torch.nn.Linear(2, 2), tiny_tokenizer())


def test_from_bridge_refuses_processed_weights_and_accepts_raw_ones():
    bridge = _users_bridge()
    with contextlib.redirect_stdout(io.StringIO()):
        bridge.enable_compatibility_mode()  # default: folds norms, centres the unembedding
    with pytest.raises(ValueError, match=r"weights were processed.*raw correct-answer logit.*no_processing=True"):
        from_bridge(bridge)
    raw = _users_bridge()
    assert not raw.compatibility_mode
    hm = wrap(raw)
    assert hm.bridge is raw and raw.compatibility_mode and hm.spec.name == "my-gpt2"
    x = torch.randint(3, 60, (1, 6))
    _, cache = hm.bridge.run_with_cache(x, names_filter=lambda n: n.endswith("attn.hook_z"))
    assert cache["blocks.2.attn.hook_z"].shape == (1, 6, 4, 16)  # HookedTransformer hook names and shapes
    assert wrap(hm) is hm


def test_a_transformerlens3_hooked_transformer_is_refused_with_the_conversion():
    try:
        from transformer_lens import HookedTransformer, HookedTransformerConfig
    except ImportError:
        pytest.skip("TransformerLens 4 has no HookedTransformer; this test runs in the TL 3.x environment")
    cfg = HookedTransformerConfig(n_layers=1, d_model=16, n_ctx=8, d_head=4, n_heads=4, d_vocab=20, act_fn="gelu")
    for entry in (wrap, from_bridge, lambda m: from_hf(m, tiny_tokenizer())):
        with unchecked(), pytest.raises(TypeError, match=r"HookedTransformer.*boot_transformers.*no_processing=True"):
            entry(HookedTransformer(cfg))


def test_load_model_passes_device_map_to_accelerate(tmp_path):
    hf, tok = load_hf_model("tiny-llama")
    hf.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    x = torch.randint(3, 60, (2, 9))
    placed, _ = load_hf_model(str(tmp_path / "m"), device_map="auto")  # on a CPU-only machine: all on the CPU
    with pytest.raises(ValueError, match="device_map as a string"):  # it reaches from_pretrained, which checks it
        load_hf_model(str(tmp_path / "m"), device_map="everywhere")
    torch.testing.assert_close(_logits(placed, x), _logits(hf, x), atol=0, rtol=0)
    hm = load_model(str(tmp_path / "m"), device_map="auto")
    torch.testing.assert_close(hm(x), _logits(hf, x), atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="device_map='auto' needs a model loaded from files"):
        load_hf_model("tiny-llama", device_map="auto")


def _sft_data(tok, n=16):
    rng = random.Random(0)
    records = []
    for _ in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        records.append(
            {
                "tokens": tok(f"{a} + {b} = ", add_special_tokens=False)["input_ids"],
                "answer_tokens": tok(str(a + b), add_special_tokens=False)["input_ids"],
            }
        )
    return build_sft_dataset(tok, records)


@pytest.mark.integration  # every stage of the pipeline, in process
@pytest.mark.parametrize("held", ["hf_model", "bridge"])
def test_notebook_users_own_model_through_every_stage(held, tmp_path):
    hm = from_hf(*_users_hf_model()) if held == "hf_model" else from_bridge(_users_bridge())
    pairs = generate_pairs(
        hm.tokenizer,
        load_templates(),
        GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=6),
    )

    # identify: exact path patching equals one hooked forward per sender
    res = path_patch(hm, pairs, metric="logit_diff")
    ref = path_patch(hm, pairs.select(range(3)), metric="logit_diff", method="reference")
    sub = path_patch(hm, pairs.select(range(3)), metric="logit_diff")
    torch.testing.assert_close(sub.head_effects, ref.head_effects, atol=1e-4, rtol=0)
    assert res.head_effects.abs().max() > 1e-3

    # validate: the knockout ranks heads by the patching result and starts at the model's own accuracy
    ko = knockout_curve(hm, pairs, res, max_k=2, n_random=1)
    assert [tuple(h) for h in ko.ranked_heads] == [(l, h) for l, h, _ in res.top_heads(2)]
    accuracy = sum(score_pairs(hm, pairs, device=hm.device).correct) / len(pairs)
    assert ko.baseline_accuracy == ko.ranked_accuracy[0] == pytest.approx(accuracy)

    # analyze: shares are the bridge's own attention pattern summed over each role's positions
    heads = [(l, h) for l, h, _ in res.top_heads(2)]
    abr = attention_by_role(hm, pairs, heads)
    row = pairs.dataset[0]
    _, cache = hm.bridge.run_with_cache(
        torch.tensor([row["tokens"]]), names_filter=lambda n: n.endswith("hook_pattern")
    )
    masks = role_masks(row["n_tokens"], row["prefix_len"], row["pos_a"], row["pos_b"], row["pos_op"]).float()
    for i, (layer, head) in enumerate(heads):
        last_row = cache[f"blocks.{layer}.attn.hook_pattern"][0, head, row["pos_last"]]
        torch.testing.assert_close(abr.shares[0, i], masks @ last_row, atol=1e-5, rtol=1e-5)

    # improve: precise SFT on a plain copy of the user's model, two steps
    before = {n: p.detach().clone() for n, p in hm.bridge.named_parameters()}
    plain = hm.plain_hf_model()
    x = torch.tensor(pairs.tokens[:2])
    torch.testing.assert_close(_logits(plain, x), hm(x), atol=1e-5, rtol=1e-5)
    key = select_key_components(res, rule="topk", k=2)
    cfg = SFTConfig(
        learning_rate=1e-2,
        batch_size=8,
        micro_batch_size=4,
        max_steps=2,
        logging_steps=1,
        progress_bar=False,
        save_final=False,
        warmup_ratio=0.0,
    )
    adapter, result = train_sft(
        plain, hm.tokenizer, _sft_data(hm.tokenizer), tmp_path, key=key, config=cfg, model_name=hm.spec.name
    )
    assert result.global_step == 2 and 0 < result.n_trainable < result.n_model_params
    assert {(s.layer) for s in adapter.slices.slices if "q" in s.roles} == {l for l, _ in key.heads}
    assert all(d.abs().max() > 0 for _, d in adapter.named_deltas())
    assert all(torch.equal(p, before[n]) for n, p in hm.bridge.named_parameters())  # the hooked model is untouched


def test_path_patch_refuses_weights_no_offload_hook_loads(tiny_llama, template_sets):
    """A split model runs (tests/test_big_models.py); a parameter on meta that no accelerate hook fills is refused."""
    from mathcircuits.data import GenerationConfig, generate_pairs
    from mathcircuits.patching import path_patch

    pairs = generate_pairs(tiny_llama.tokenizer, template_sets, GenerationConfig(template_ids=("add_eq_1",)))
    block = tiny_llama.bridge.blocks[1]
    block.register_parameter("_elsewhere", torch.nn.Parameter(torch.zeros(1, device="meta")))  # weights never loaded
    try:
        with pytest.raises(ValueError, match=r"meta device that no offload hook loads.*_elsewhere.*Fix:"):
            path_patch(tiny_llama, pairs)
    finally:
        del block._elsewhere
    path_patch(tiny_llama, pairs.select(range(2)))  # with its weights again: it runs
