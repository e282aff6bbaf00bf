"""Tests of mathcircuits.finetune on tiny random models (offline, each well under 2 s)."""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil

import pytest
import torch

from mathcircuits.finetune import (
    HeadSliceAdapter,
    SFTConfig,
    SFTResult,
    SliceError,
    SliceSet,
    build_sft_dataset,
    head_slices,
    train_sft,
)
from mathcircuits.finetune.adapter import ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME
from mathcircuits.finetune.layouts import model_facts
from mathcircuits.models import Head, load_hf_model
from mathcircuits.patching import KeyComponents, SelectionError

from helpers import unchecked

D_HEAD = 16  # tiny-llama and tiny-gpt2: d_model 64, 4 heads


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.set_num_threads(1)  # the machine is shared; one thread is faster and steadier
    torch.manual_seed(0)
    random.seed(0)


def _tokens(n_seq: int = 2, n_tok: int = 9, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 60, (n_seq, n_tok), generator=torch.Generator().manual_seed(seed))


def _key(model, heads, mlps=(), name=None) -> KeyComponents:
    return KeyComponents(model=model_facts(model, name), heads=tuple(Head.of(h) for h in heads), mlps=tuple(mlps))


def _random_deltas(adapter: HeadSliceAdapter, scale: float = 0.1) -> None:
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, d in adapter.named_deltas():
            d.copy_(torch.randn(d.shape, generator=gen) * scale)


def _toy_sft_data(tok, n: int = 32):
    """Tiny arithmetic-like SFT data: prompt "a+b=" and the answer digits (loss on the answer only)."""
    rng = random.Random(0)
    records = []
    for _ in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        records.append(
            {
                "tokens": tok(f"{a}+{b}=", add_special_tokens=False)["input_ids"],
                "answer_tokens": tok(str(a + b), add_special_tokens=False)["input_ids"],
            }
        )
    return build_sft_dataset(tok, records)


def _cfg(**kw) -> SFTConfig:
    base = dict(
        learning_rate=1e-2,
        batch_size=8,
        micro_batch_size=4,
        max_steps=3,
        logging_steps=1,
        progress_bar=False,
        save_final=False,
        warmup_ratio=0.0,
    )
    return SFTConfig(**{**base, **kw})


# ----------------------------------------------------------------------------- slice mapping


def test_llama_gqa_slices_are_head_rows_and_columns():
    model, _ = load_hf_model("tiny-llama")  # 4 heads, 2 KV heads: group size 2
    s = head_slices(model, [(1, 3)]).by_name()
    q, k, v, o = (s[f"model.layers.1.self_attn.{p}_proj.weight"] for p in "qkvo")
    assert (q.axis, q.ranges) == (0, ((3 * D_HEAD, 4 * D_HEAD),))  # rows of q_proj
    assert (o.axis, o.ranges) == (1, ((3 * D_HEAD, 4 * D_HEAD),))  # columns of o_proj
    assert (k.axis, k.ranges) == (0, ((D_HEAD, 2 * D_HEAD),))  # head 3 is in KV group 1
    assert (v.axis, v.ranges) == (0, ((D_HEAD, 2 * D_HEAD),))
    assert q.n_params == D_HEAD * 64 and o.n_params == 64 * D_HEAD
    assert len(s) == 4  # nothing else, no bias in Llama


def test_adjacent_heads_merge_into_one_range_and_counts_add_up():
    model, _ = load_hf_model("tiny-llama")
    ss = head_slices(model, [(0, 1), (0, 2)], kv_policy="frozen", mlps=[2])
    q = ss.by_name()["model.layers.0.self_attn.q_proj.weight"]
    assert q.ranges == ((D_HEAD, 3 * D_HEAD),)
    mlp_params = sum(p.numel() for p in model.model.layers[2].mlp.parameters())
    assert ss.n_tuned == 2 * (2 * D_HEAD * 64) + mlp_params
    assert ss.n_model_params == sum(p.numel() for p in model.parameters())
    assert all(s.whole for s in ss.slices if "mlp" in s.roles)


@pytest.mark.parametrize(
    "policy, heads, groups",
    [
        ("group", [(0, 0)], [(0, 0)]),  # any key head of the group trains the shared K/V
        ("exclusive", [(0, 0)], []),  # head 1 shares group 0 and is not key: keep K/V frozen
        ("exclusive", [(0, 0), (0, 1)], [(0, 0)]),  # whole group is key
        ("frozen", [(0, 0), (0, 1)], []),
    ],
)
def test_kv_policy(policy, heads, groups):
    model, _ = load_hf_model("tiny-llama")
    ss = head_slices(model, heads, kv_policy=policy)
    assert list(ss.kv_groups) == groups
    has_kv = any(r in ("k", "v") for s in ss.slices for r in s.roles)
    assert has_kv == bool(groups)


def test_gpt2_fused_qkv_slices_and_biases():
    model, _ = load_hf_model("tiny-gpt2")  # c_attn: Conv1D weight [in=64, out=3*64]
    s = head_slices(model, [(1, 2)]).by_name()
    w, b = s["transformer.h.1.attn.c_attn.weight"], s["transformer.h.1.attn.c_attn.bias"]
    blocks = tuple((off + 2 * D_HEAD, off + 3 * D_HEAD) for off in (0, 64, 128))  # q, k, v blocks
    assert (w.axis, w.ranges, w.roles) == (1, blocks, ("q", "k", "v"))
    assert (b.axis, b.ranges) == (0, blocks)
    o = s["transformer.h.1.attn.c_proj.weight"]
    assert (o.axis, o.ranges) == (0, ((2 * D_HEAD, 3 * D_HEAD),))  # Conv1D rows = input features
    assert "transformer.h.1.attn.c_proj.bias" not in s  # shared by all heads


def _boot(hf_model, tok, name):
    from transformer_lens.model_bridge import TransformerBridge

    with contextlib.redirect_stdout(io.StringIO()):
        bridge = TransformerBridge.boot_transformers(name, hf_model=hf_model, tokenizer=tok)
        bridge.enable_compatibility_mode(no_processing=True)
    return bridge.eval()


def _bridge_cache(source, perturb=None):
    """hook_z and hook_attn_out of a (perturbed) copy of ``source``, through the TransformerLens bridge."""
    model, tok = load_hf_model(source)
    if perturb is not None:
        with torch.no_grad():
            perturb(model)
    bridge = _boot(model, tok, source)
    with torch.no_grad():
        _, cache = bridge.run_with_cache(_tokens(), names_filter=lambda n: n.endswith(("attn.hook_z", "hook_attn_out")))
    return cache


def _perturb_slice(slice_, scale=0.5):
    def apply(model):
        p = model.get_parameter(slice_.name)
        noise = torch.randn(slice_.slice_shape, generator=torch.Generator().manual_seed(3)) * scale
        p.index_add_(slice_.axis, slice_.indices(), noise)
        return noise

    return apply


def _changed_heads(clean, pert, layer):
    diff = (clean[f"blocks.{layer}.attn.hook_z"] - pert[f"blocks.{layer}.attn.hook_z"]).abs().amax(dim=(0, 1, 3))
    return [h for h, x in enumerate(diff.tolist()) if x > 1e-6]


@pytest.fixture(scope="module")
def llama_clean():
    torch.set_num_threads(1)
    return _bridge_cache("tiny-llama")


def test_bridge_q_rows_change_only_that_heads_z(llama_clean):
    model, _ = load_hf_model("tiny-llama")
    q = head_slices(model, [(1, 2)], kv_policy="frozen").by_name()["model.layers.1.self_attn.q_proj.weight"]
    pert = _bridge_cache("tiny-llama", _perturb_slice(q))
    assert _changed_heads(llama_clean, pert, 0) == []
    assert _changed_heads(llama_clean, pert, 1) == [2]


def test_bridge_kv_rows_change_exactly_the_group(llama_clean):
    model, _ = load_hf_model("tiny-llama")
    k = head_slices(model, [(1, 2)], kv_policy="group").by_name()["model.layers.1.self_attn.k_proj.weight"]
    pert = _bridge_cache("tiny-llama", _perturb_slice(k))
    assert _changed_heads(llama_clean, pert, 1) == [2, 3]  # group 1 = heads 2, 3: shared K changes both


def test_bridge_o_columns_are_that_heads_contribution(llama_clean):
    model, _ = load_hf_model("tiny-llama")
    o = head_slices(model, [(1, 2)]).by_name()["model.layers.1.self_attn.o_proj.weight"]
    noise_box = {}
    pert = _bridge_cache("tiny-llama", lambda m: noise_box.setdefault("n", _perturb_slice(o)(m)))
    assert _changed_heads(llama_clean, pert, 1) == []  # z is before o_proj
    z_head = llama_clean["blocks.1.attn.hook_z"][:, :, 2]  # [B, S, d_head]
    expected = z_head @ noise_box["n"].T  # o_proj weight is [out, in]: columns of head 2
    got = pert["blocks.1.hook_attn_out"] - llama_clean["blocks.1.hook_attn_out"]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_bridge_gpt2_fused_q_and_o():
    clean = _bridge_cache("tiny-gpt2")
    model, _ = load_hf_model("tiny-gpt2")
    w = head_slices(model, [(1, 1)], kv_policy="frozen").by_name()["transformer.h.1.attn.c_attn.weight"]
    assert w.roles == ("q",)
    assert _changed_heads(clean, _bridge_cache("tiny-gpt2", _perturb_slice(w)), 1) == [1]
    o = head_slices(model, [(1, 1)]).by_name()["transformer.h.1.attn.c_proj.weight"]
    box = {}
    pert = _bridge_cache("tiny-gpt2", lambda m: box.setdefault("n", _perturb_slice(o)(m)))
    assert _changed_heads(clean, pert, 1) == []
    expected = clean["blocks.1.attn.hook_z"][:, :, 1] @ box["n"]  # Conv1D weight is [in, out]: rows of head 1
    torch.testing.assert_close(
        pert["blocks.1.hook_attn_out"] - clean["blocks.1.hook_attn_out"], expected, atol=1e-5, rtol=1e-4
    )


# ----------------------------------------------------------------------------- errors


def test_selection_from_another_model_is_refused():
    llama, _ = load_hf_model("tiny-llama")
    gpt2, _ = load_hf_model("tiny-gpt2")
    with pytest.raises(SelectionError, match="does not fit"):
        head_slices(llama, _key(gpt2, [(0, 1)]))
    with pytest.raises(SelectionError, match="does not fit"):  # same shape, other name
        head_slices(llama, _key(llama, [(0, 1)], name="tiny-llama"), model_name="SmolLM2-135M-Instruct")
    assert head_slices(llama, _key(llama, [(0, 1)], name="tiny-llama"), model_name="tiny-llama").heads == ((0, 1),)


def test_clear_errors_for_bad_heads_policies_and_architectures():
    model, _ = load_hf_model("tiny-llama")
    with pytest.raises(SliceError, match=r"head \(0, 7\) is out of range .*heads 0..3"):
        head_slices(model, [(0, 7)])
    with pytest.raises(SliceError, match="MLP 5 is out of range"):
        head_slices(model, [(0, 1)], mlps=[5])
    with unchecked(), pytest.raises(SliceError, match="kv_policy"):
        head_slices(model, [(0, 1)], kv_policy="shared")
    with pytest.raises(SliceError, match="nothing would be tuned"):
        head_slices(model, [])
    with pytest.raises(SliceError, match=r"roles=\('x',\) is not a non-empty subset"):
        head_slices(model, [(0, 1)], roles=("x",))
    gpt2, _ = load_hf_model("tiny-gpt2")
    with pytest.raises(SliceError, match="do not fit this model"):
        HeadSliceAdapter(gpt2, head_slices(model, [(0, 1)]))


# ----------------------------------------------------------------------------- adapter


def test_adapter_save_load_merge_round_trip(tmp_path):
    from transformers import AutoModelForCausalLM

    model, _ = load_hf_model("tiny-llama")
    adapter = HeadSliceAdapter(model, head_slices(model, [(0, 1), (2, 3)], mlps=[1]))
    _random_deltas(adapter)
    x = _tokens()
    with torch.no_grad():
        tuned = adapter(x).logits
    adapter.save_pretrained(tmp_path / "adapter")
    cfg = json.loads((tmp_path / "adapter" / ADAPTER_CONFIG_NAME).read_text())
    assert cfg["adapter_type"] == "mathcircuits/head-slice" and cfg["slices"]["n_tuned"] == adapter.n_trainable
    from safetensors.torch import load_file

    saved = load_file(str(tmp_path / "adapter" / ADAPTER_WEIGHTS_NAME))
    assert sum(t.numel() for k, t in saved.items() if k.endswith(".delta")) == adapter.n_trainable  # only the slices

    again = HeadSliceAdapter.from_pretrained(load_hf_model("tiny-llama")[0], tmp_path / "adapter")
    assert again.n_trainable == 0  # inference by default, like PEFT
    with torch.no_grad():
        torch.testing.assert_close(again(x).logits, tuned, atol=0, rtol=0)
        merged = again.merge_and_unload()
        torch.testing.assert_close(merged(x).logits, tuned, atol=1e-5, rtol=1e-5)
    merged.save_pretrained(tmp_path / "merged")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", attn_implementation="eager").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(x).logits, merged(x).logits, atol=0, rtol=0)
    with pytest.raises(RuntimeError, match="unloaded"):
        again(x)


def test_adapter_refuses_foreign_folders(tmp_path):
    model, _ = load_hf_model("tiny-llama")
    (tmp_path / ADAPTER_CONFIG_NAME).write_text(json.dumps({"peft_type": "LORA"}))
    with pytest.raises(SliceError, match="not a mathcircuits head-slice adapter"):
        HeadSliceAdapter.from_pretrained(model, tmp_path)
    HeadSliceAdapter(model, head_slices(model, [(0, 1)])).save_pretrained(tmp_path / "a")
    other = HeadSliceAdapter(load_hf_model("tiny-llama")[0], head_slices(model, [(0, 2)]))
    with pytest.raises(SliceError, match="other slices"):
        other.load_weights(tmp_path / "a")


def test_gradient_rescaled_by_heads_over_tuned_heads():
    model, _ = load_hf_model("tiny-llama")
    ss = head_slices(model, [(0, 1), (1, 0), (1, 3)], mlps=[2])  # layer 0: h=1 of H=4; layer 1: h=2
    x = _tokens()
    grads = {}
    for scaled in (False, True):
        adapter = HeadSliceAdapter(load_hf_model("tiny-llama")[0], ss, grad_scale=scaled)
        adapter(x, labels=x).loss.backward()
        grads[scaled] = {s.name: d.grad.clone() for s, d in adapter.named_deltas()}
    for s in ss.slices:
        want = {0: 4.0, 1: 2.0}.get(s.layer, 1.0) if "mlp" not in s.roles else 1.0
        torch.testing.assert_close(grads[True][s.name], want * grads[False][s.name])
    assert ss.grad_scales()["model.layers.0.self_attn.q_proj.weight"] == 4.0


def test_base_gets_no_gradients_and_no_optimizer_state():
    model, _ = load_hf_model("tiny-llama")
    adapter = HeadSliceAdapter(model, head_slices(model, [(1, 2)]))
    adapter(_tokens(), labels=_tokens()).loss.backward()
    assert all(p.grad is None and not p.requires_grad for p in model.parameters())
    assert all(d.grad is not None for d in adapter.deltas.values())
    assert adapter.unload() is model and all(p.requires_grad for p in model.parameters())  # flags restored


# ----------------------------------------------------------------------------- training


def test_untouched_parameters_stay_bit_identical_with_weight_decay(tmp_path):
    model, tok = load_hf_model("tiny-llama")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    key = _key(model, [(0, 1), (2, 2)], mlps=[1])
    adapter, _ = train_sft(model, tok, _toy_sft_data(tok), tmp_path, key=key, config=_cfg(weight_decay=0.1))
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # base untouched while adapted
    masks = {s.name: s.mask() for s in adapter.slices.slices}
    merged = adapter.merge_and_unload()
    for name, p in merged.named_parameters():
        if name in masks:
            assert torch.equal(p[~masks[name]], before[name][~masks[name]]), name
            assert not torch.equal(p[masks[name]], before[name][masks[name]]), name
        else:
            assert torch.equal(p, before[name]), name


def test_weight_decay_acts_on_the_effective_weights():
    from mathcircuits.finetune.hf_trainer import effective_decay_hook

    model, _ = load_hf_model("tiny-llama")
    adapter = HeadSliceAdapter(model, head_slices(model, [(0, 1)], kv_policy="frozen"))
    weights = list(adapter.named_deltas())
    opt = torch.optim.AdamW([d for _, d in weights], lr=0.1, weight_decay=0.0)
    opt.register_step_pre_hook(effective_decay_hook(adapter, weights, wd=0.5))
    for _, d in weights:
        d.grad = torch.zeros_like(d)  # Adam's own update is zero: only the decay acts
    opt.step()
    for s, d in weights:
        torch.testing.assert_close(d.detach(), -0.1 * 0.5 * adapter.base_values(s.name))  # W0 + Δ = (1 - lr·wd)·W0


def test_tiny_finetune_lowers_the_loss(tmp_path):
    model, tok = load_hf_model("tiny-gpt2")
    _, result = train_sft(
        model,
        tok,
        _toy_sft_data(tok, 64),
        tmp_path,
        key=_key(model, [(0, 1), (1, 2), (1, 3)], mlps=[1]),
        config=_cfg(max_steps=16, learning_rate=2e-2, save_final=True),
    )
    losses = [l for _, l in result.loss_history]
    assert sum(losses[-4:]) / 4 < 0.8 * losses[0]
    assert result.n_trainable < result.n_model_params and result.global_step == 16
    assert (tmp_path / "final" / ADAPTER_WEIGHTS_NAME).exists() and (tmp_path / "log.jsonl").exists()
    assert SFTResult.load(tmp_path / "sft_result.json") == result


@pytest.mark.slow
def test_resume_from_checkpoint_reproduces_the_uninterrupted_run(tmp_path):
    data_model, tok = load_hf_model("tiny-llama")
    data, key = _toy_sft_data(tok), _key(data_model, [(0, 1), (2, 3)], mlps=[2])
    cfg = _cfg(max_steps=4, save_steps=2, weight_decay=0.1, warmup_ratio=0.25)
    full_run, _ = train_sft(load_hf_model("tiny-llama")[0], tok, data, tmp_path / "a", key=key, config=cfg)
    shutil.copytree(tmp_path / "a" / "checkpoint-2", tmp_path / "b" / "checkpoint-2")  # as if run b died after step 2
    resumed, result = train_sft(
        load_hf_model("tiny-llama")[0], tok, data, tmp_path / "b", key=key, config=cfg, resume_from_checkpoint=True
    )
    assert result.global_step == 4 and result.resumed_from == str(tmp_path / "b" / "checkpoint-2")
    new_logs = [json.loads(line) for line in (tmp_path / "b" / "log.jsonl").read_text().splitlines()]
    assert sorted({e["step"] for e in new_logs if "loss" in e}) == [3, 4]  # only the missing steps ran
    for (s, d_full), (_, d_res) in zip(full_run.named_deltas(), resumed.named_deltas()):
        torch.testing.assert_close(d_res, d_full, atol=1e-7, rtol=1e-6, msg=s.name)


def test_full_mode_trains_everything(tmp_path):
    model, tok = load_hf_model("tiny-llama")
    emb = model.get_input_embeddings().weight.detach().clone()
    trained, result = train_sft(model, tok, _toy_sft_data(tok), tmp_path, config=_cfg(mode="full", max_steps=2))
    assert trained is model and result.n_trainable == result.n_model_params
    assert not torch.equal(model.get_input_embeddings().weight, emb)
    with pytest.raises(ValueError, match="got no key components"):
        train_sft(model, tok, _toy_sft_data(tok), tmp_path, config=_cfg())
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train_sft(
            model, tok, _toy_sft_data(tok), tmp_path / "empty", config=_cfg(mode="full"), resume_from_checkpoint=True
        )


@pytest.mark.parametrize("source", ["tiny-llama", "tiny-gpt2"])
def test_target_only_logits_give_the_same_loss_and_gradients(source):
    from mathcircuits.finetune.hf_trainer import pad_collate

    model, tok = load_hf_model(source)
    data = _toy_sft_data(tok, 6)
    features = [data[i] for i in range(6)]
    features[0] = {"input_ids": features[0]["input_ids"] + [5, 6], "labels": features[0]["labels"] + [5, 6]}  # ragged
    adapter = HeadSliceAdapter(model, head_slices(model, [(1, 2)], mlps=[0]))
    out = {}
    for target_only in (False, True):
        batch = pad_collate(tok.pad_token_id, target_logits_only=target_only)(features)
        adapter.zero_grad()
        loss = adapter(**batch).loss
        loss.backward()
        out[target_only] = (loss.detach(), [d.grad.clone() for d in adapter.deltas.values()])
    assert (
        batch["logits_to_keep"].sum()
        == batch["shift_labels"].numel()
        == sum((torch.tensor(f["labels"]) != -100).sum() for f in features)
    )
    torch.testing.assert_close(out[True][0], out[False][0], atol=1e-6, rtol=1e-6)
    for g_target, g_all in zip(out[True][1], out[False][1]):
        torch.testing.assert_close(g_target, g_all, atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------- data and values


def test_sft_dataset_masks_the_prompt():
    _, tok = load_hf_model("tiny-llama")
    wp = [
        {
            "instruction": "Tom has 3 pens. He buys 2. How many? ",
            "input": "",
            "output": "\nA: 3 + 2 = 5. The answer is 5.",
            "answer": "5.0",
        }
    ]
    row = build_sft_dataset(tok, wp)[0]
    n_prompt = len(
        tok("Question: Tom has 3 pens. He buys 2. How many?\nAnswer:", add_special_tokens=False)["input_ids"]
    )
    assert row["labels"][:n_prompt] == [-100] * n_prompt
    assert (
        tok.decode(row["labels"][n_prompt:-1]) == " 3 + 2 = 5. The answer is 5."
        and row["labels"][-1] == tok.eos_token_id
    )
    short = build_sft_dataset(tok, wp, target="answer", add_eos=False)[0]
    assert tok.decode(short["labels"][n_prompt:]) == " The answer is 5."
    pairs = build_sft_dataset(tok, [{"tokens": [5, 6, 7], "answer_tokens": [8, 9]}])[0]
    assert pairs == {"input_ids": [5, 6, 7, 8, 9], "labels": [-100, -100, -100, 8, 9]}
    with pytest.raises(ValueError, match="expected arithmetic pairs"):
        build_sft_dataset(tok, [{"question": "x"}])


def test_slice_set_and_config_round_trip(tmp_path):
    model, _ = load_hf_model("tiny-gpt2")
    ss = head_slices(model, _key(model, [(0, 1), (1, 2)], mlps=[0]), kv_policy="exclusive")
    assert SliceSet.load(ss.save(tmp_path / "slices.json")) == ss
    assert SFTConfig.from_dict(SFTConfig(mode="full").to_dict()) == SFTConfig(mode="full")
    with pytest.raises(ValueError, match="multiple"):
        SFTConfig(batch_size=12, micro_batch_size=8)


@pytest.mark.slow
def test_embedded_smollm2_key_heads_map_and_merge():
    try:
        model, tok = load_hf_model("embedded")
    except (FileNotFoundError, OSError) as err:
        pytest.skip(f"embedded model not available: {err}")
    ss = head_slices(model, [(14, 2), (14, 1), (18, 5)], mlps=[14])  # 9 heads, 3 KV heads of d_head 64
    by = ss.by_name()
    assert by["model.layers.14.self_attn.q_proj.weight"].ranges == ((64, 192),)
    assert by["model.layers.14.self_attn.k_proj.weight"].ranges == ((0, 64),)  # heads 1, 2 are in group 0
    assert by["model.layers.18.self_attn.v_proj.weight"].ranges == ((64, 128),)  # head 5 is in group 1
    assert ss.grad_scales()["model.layers.14.self_attn.o_proj.weight"] == 4.5
    adapter = HeadSliceAdapter(model, ss)
    _random_deltas(adapter, scale=0.01)
    x = torch.tensor([tok("12 + 35 = ", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        tuned = adapter(x).logits
        torch.testing.assert_close(adapter.merge_and_unload()(x).logits, tuned, atol=1e-4, rtol=1e-4)


def test_roles_restrict_what_a_head_tunes():
    model, _ = load_hf_model("tiny-llama")
    ss = head_slices(model, [(1, 2)], roles=("v", "o"))
    assert {s.name for s in ss.slices} == {
        "model.layers.1.self_attn.v_proj.weight",
        "model.layers.1.self_attn.o_proj.weight",
    }
    assert ss.kv_groups == ((1, 1),)
    assert head_slices(model, [(1, 2)], roles=("q", "o")).kv_groups == ()  # no K/V role: no group is tuned
