import pytest
import torch

from mathcircuits.models import HookedModel, from_hf, hooks, load_hf_model, load_model, resolve_source
from mathcircuits.models.tiny import tiny_model


@pytest.mark.parametrize("source", ["tiny-llama", "tiny-gpt2"])
def test_bridge_logits_equal_hf_logits(source):
    hooked = load_model(source)
    hf, _ = load_hf_model(source)
    tokens = hooked.to_tokens(["3 + 5 = ", "7 - 2 = "])
    with torch.no_grad():
        assert torch.allclose(hooked(tokens), hf(tokens).logits, atol=1e-5)


def test_shape_facts_and_hook_names(tiny_llama, tiny_gpt2):
    s = tiny_llama.spec
    assert (s.n_layers, s.n_heads, s.n_kv_heads, s.d_head, s.group_size) == (3, 4, 2, 16, 2)
    assert tiny_gpt2.spec.n_kv_heads == tiny_gpt2.spec.n_heads
    _, cache = tiny_llama.bridge.run_with_cache(tiny_llama.to_tokens("1 + 2 = "))
    assert cache["blocks.0.attn.hook_z"].shape == (1, 8, 4, 16)
    assert cache["blocks.2.attn.hook_pattern"].shape == (1, 4, 8, 8)
    for name in (
        "blocks.1.hook_mlp_out",
        "blocks.1.hook_resid_pre",
        "blocks.1.hook_resid_mid",
        "blocks.1.hook_resid_post",
    ):
        assert cache[name].shape == (1, 8, 64)
    assert tiny_llama.hf_model is tiny_llama.bridge.original_model


def test_the_model_runs_its_prefix_cached_forward(tiny_llama):
    """The prefix runs once into the store (clean), the hooks see the suffix only, and the logits at the last
    position equal the plain hooked forward's; a second runner on the same store reuses the prefix's cache."""
    model = tiny_llama
    toks = model.to_tokens(["1 + 2 = 3\n4 + 5 = 9\n2 + 2 =", "1 + 2 = 3\n4 + 5 = 9\n7 + 1 ="])
    seen: list[int] = []
    fwd = [(hooks.resid_pre(1), lambda act, hook: seen.append(act.shape[1]))]
    store: dict = {}
    fast = model.prefix_cached(fwd, store=store).logits_from(toks, toks.shape[1] - 1)
    ((prefix, cache),) = store.items()
    assert seen == [toks.shape[1] - len(prefix)] and len(prefix) >= 4  # one suffix run; the prefix ran clean
    with torch.no_grad():
        plain = model.bridge.run_with_hooks(toks, fwd_hooks=fwd)[:, -1:]
    assert torch.allclose(fast, plain, atol=1e-5)
    model.prefix_cached(store=store).logits_from(toks, toks.shape[1] - 1)
    assert list(store) == [prefix] and store[prefix] is cache
    bare = HookedModel(model.bridge, model.tokenizer, model.spec)  # built without the loaders' prefix runner
    with pytest.raises(RuntimeError, match="built without its prefix-cached forward"):
        bare.prefix_cached()
    assert torch.allclose(bare.logits_from(toks, 2), model.logits_from(toks, 2), atol=1e-5)


def test_the_model_says_where_and_in_what_precision_it_computes(tiny_llama):
    assert tiny_llama.dtype == torch.float32
    assert {tiny_llama.layer_device(l) for l in range(tiny_llama.spec.n_layers)} == {tiny_llama.device}
    assert tiny_llama.output_device() == tiny_llama.device
    hf, tok = tiny_model("llama", seed=0)
    assert from_hf(hf.to(torch.float16), tok).dtype == torch.float16


def test_no_weight_processing_keeps_raw_logits(tiny_llama):
    # compatibility mode with processing would centre the unembedding; raw logits must stay raw
    hf, _ = load_hf_model("tiny-llama")
    assert torch.equal(tiny_llama.bridge.W_U, hf.lm_head.weight.T)


def test_head_range_check(tiny_llama):
    with pytest.raises(IndexError, match="heads 0..3"):
        tiny_llama.spec.check_head(0, 4)


def test_source_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        resolve_source(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_source("./no/such/model")
    assert resolve_source("hub:HuggingFaceTB/SmolLM2-135M") == ("hub", "HuggingFaceTB/SmolLM2-135M")


def test_local_folder_round_trip(tmp_path):
    hf, tok = load_hf_model("tiny-llama")
    hf.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    hooked = load_model(str(tmp_path))
    tokens = hooked.to_tokens("4 * 2 = ")
    with torch.no_grad():
        assert torch.allclose(hooked(tokens), hf(tokens).logits, atol=1e-5)


@pytest.mark.slow
def test_embedded_model_loads_offline_and_matches_hf(embedded):
    assert (embedded.spec.n_layers, embedded.spec.n_heads, embedded.spec.n_kv_heads, embedded.spec.d_head) == (
        30,
        9,
        3,
        64,
    )
    hf, _ = load_hf_model("embedded")
    tokens = embedded.to_tokens(["2 + 4 = 6\n3 + 5 = "])
    with torch.no_grad():
        assert (embedded(tokens) - hf(tokens).logits).abs().max() < 1e-4
