"""Tiny random models built offline, for fast tests and teaching.

Following penzai's consistency tests: a few layers, a small hidden size, and a
character-level tokenizer that covers digits, operators, letters and the
punctuation of the templates, so every template tokenizes without a download.
"""

from __future__ import annotations

import string
from typing import Any

import torch
from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
from tokenizers import models as tokenizer_models
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from mathcircuits._errors import FixableKeyError
from mathcircuits._files import atomic_dir
from mathcircuits.models.embedded import cache_root

__all__: list[str] = []

TINY_CHARS = string.digits + string.ascii_letters + " +-*/^=<>@#&$|~%!?:.,;'\"()\n_"
_SPECIAL = ["<unk>", "<s>", "</s>"]


def tiny_tokenizer():
    """A character-level fast tokenizer (one token per character), cached on disk.

    Saved to and loaded from a folder because TransformerLens re-opens a tokenizer by its ``name_or_path``.
    """

    folder = cache_root() / "tiny-char-tokenizer-v2"
    if not (folder / "tokenizer.json").exists():
        vocab = {tok: i for i, tok in enumerate(_SPECIAL + list(TINY_CHARS))}
        core = Tokenizer(tokenizer_models.WordLevel(vocab, unk_token="<unk>"))
        core.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
        core.decoder = decoders.Fuse()  # characters join without spaces
        tok = PreTrainedTokenizerFast(
            tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>"
        )
        with atomic_dir(folder) as tmp:
            tok.save_pretrained(tmp)
    return AutoTokenizer.from_pretrained(str(folder))


def tiny_llama(
    seed: int = 0,
    n_layers: int = 3,
    d_model: int = 64,
    n_heads: int = 4,
    n_kv_heads: int = 2,
    d_mlp: int = 128,
):
    """A random Llama-style model with grouped-query attention (eager attention) and the character tokenizer."""

    tok = tiny_tokenizer()
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=d_model,
        intermediate_size=d_mlp,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_kv_heads,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    model = LlamaForCausalLM(cfg)
    _widen_init(model, seed)
    return model.eval(), tok


def tiny_gpt2(seed: int = 0, n_layers: int = 2, d_model: int = 64, n_heads: int = 4):
    """A random GPT-2-style model (fused QKV in a Conv1D, learned positions, LayerNorm) and the character tokenizer."""

    tok = tiny_tokenizer()
    torch.manual_seed(seed)
    cfg = GPT2Config(
        vocab_size=len(tok),
        n_positions=512,
        n_embd=d_model,
        n_layer=n_layers,
        n_head=n_heads,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        attn_implementation="eager",
    )
    model = GPT2LMHeadModel(cfg)
    _widen_init(model, seed)
    return model.eval(), tok


def _widen_init(model: torch.nn.Module, seed: int) -> None:
    """Re-draw weights larger: HF's 0.02 init makes attention and MLPs nearly uniform, which lets bugs hide."""
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=gen, device="cpu") * (1.0 / p.shape[-1] ** 0.5) * 1.5)


# family -> (HF model_type, config keys beyond the common ones). The shape is the test matrix's:
# 3 layers, 4 heads of 16, 2 KV heads where the family has GQA, hidden 64, MLP 128.
TINY_FAMILIES: dict[str, tuple[str, dict[str, int | None]]] = {
    "llama": ("llama", {"num_key_value_heads": 2}),
    "mistral": ("mistral", {"num_key_value_heads": 2, "sliding_window": None}),
    "qwen2": ("qwen2", {"num_key_value_heads": 2}),
    "qwen3": ("qwen3", {"num_key_value_heads": 2, "head_dim": 16}),
    "gemma": ("gemma", {"num_key_value_heads": 2, "head_dim": 16}),
    "gemma2": ("gemma2", {"num_key_value_heads": 2, "head_dim": 16}),
    "gemma3": ("gemma3_text", {"num_key_value_heads": 2, "head_dim": 16}),
    "phi3": ("phi3", {"num_key_value_heads": 2}),
    "gpt2": ("gpt2", {"n_inner": 128}),
    "gpt_neox_parallel": ("gpt_neox", {"use_parallel_residual": True}),
    "gpt_neox_sequential": ("gpt_neox", {"use_parallel_residual": False}),
    "olmo": ("olmo", {"num_key_value_heads": 2}),
    "olmo2": ("olmo2", {"num_key_value_heads": 2}),
    "stablelm": ("stablelm", {"num_key_value_heads": 2}),
    "starcoder2": ("starcoder2", {"num_key_value_heads": 2}),
    "phi": ("phi", {}),
    "gptj": ("gptj", {"rotary_dim": 16, "n_inner": 128}),
}
_ALIASES = {"gpt_neox": "gpt_neox_parallel", "pythia": "gpt_neox_parallel", "gemma3_text": "gemma3"}
# friendly override names -> HF config keys
_OVERRIDE_KEYS = {
    "n_layers": "num_hidden_layers",
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "d_mlp": "intermediate_size",
    "d_head": "head_dim",
}


def tiny_family_name(family: str) -> str:
    """The key in :data:`TINY_FAMILIES` for ``family`` ("gpt-neox-parallel", "gpt_neox" and "pythia" all name one).

    Any case, hyphens or underscores; a family with no tiny model is a ``KeyError`` listing those that have one.
    """
    key = family.strip().lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key not in TINY_FAMILIES:
        raise FixableKeyError(
            f"there is no tiny model of family {family!r}. ",
            f"use one of {sorted(TINY_FAMILIES)} (hyphens or underscores).",
        )
    return key


def tiny_model(family: str, seed: int = 0, **overrides: Any):
    """A tiny random HF causal LM of ``family`` (:data:`TINY_FAMILIES`) and :func:`tiny_tokenizer`, built offline.

    ``overrides``: ``n_layers``, ``d_model``, ``n_heads``, ``n_kv_heads``, ``d_mlp``, ``d_head``, or any HF config
    key of the family (e.g. ``use_parallel_residual=False``). The model is in eval mode with eager attention.
    """

    model_type, extra = TINY_FAMILIES[tiny_family_name(family)]
    tok = tiny_tokenizer()
    kwargs: dict[str, Any] = {
        "vocab_size": len(tok),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "max_position_embeddings": 512,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        **extra,
    }
    for key, value in overrides.items():
        kwargs[_OVERRIDE_KEYS.get(key, key)] = value
    if "n_inner" in extra and "d_mlp" in overrides:
        kwargs["n_inner"] = overrides["d_mlp"]
    cfg = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    # the bridge finds its adapter by the architecture name, which from_config leaves unset
    model.config.architectures = [type(model).__name__]
    _widen_init(model, seed)
    return model.eval(), tok
