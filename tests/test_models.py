import pytest
import torch

from mathcircuits.models import load_hf_model, load_model, resolve_source


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
