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

__all__ = ["TINY_CHARS", "TINY_FAMILIES", "tiny_family_name", "tiny_gpt2", "tiny_llama", "tiny_model", "tiny_tokenizer"]

TINY_CHARS = string.digits + string.ascii_letters + " +-*/^=<>@#&$|~%!?:.,;'\"()\n_"
_SPECIAL = ["<unk>", "<s>", "</s>"]


def tiny_tokenizer():
    """A character-level fast tokenizer (one token per character), cached on disk.

    It is saved to and loaded from a folder because TransformerLens re-opens a
    tokenizer by its ``name_or_path``.
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
    """A random Llama-style model with grouped-query attention (eager attention).

    Args:
        seed: Torch seed for the random weights.
        n_layers: Number of blocks.
        d_model: Residual stream width.
        n_heads: Query heads per layer.
        n_kv_heads: Key/value heads per layer (divides ``n_heads``).
        d_mlp: MLP hidden width.

    Returns:
        ``(model, tokenizer)``: the HF causal LM in eval mode and the character tokenizer.
    """

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
    """A random GPT-2-style model (fused QKV in a Conv1D, learned positions, LayerNorm).

    Args:
        seed: Torch seed for the random weights.
        n_layers: Number of blocks.
        d_model: Residual stream width.
        n_heads: Attention heads per layer.

    Returns:
        ``(model, tokenizer)``: the HF causal LM in eval mode and the character tokenizer.
    """

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
    """Re-draw weights with a larger scale so that random tiny models have
    non-trivial attention patterns and MLP effects (HF's 0.02 init makes
    everything nearly uniform, which would let bugs hide in tests)."""
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
    """The canonical tiny family for ``family`` ("gpt-neox-parallel", "gpt_neox" and "pythia" all name one).

    Args:
        family: A family name or alias, any case, hyphens or underscores.

    Returns:
        The key of the family in :data:`TINY_FAMILIES`.

    Raises:
        KeyError: the family has no tiny model; the message lists those that do.
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
    """A tiny random HF causal LM of ``family`` with the character tokenizer, built offline.

    Args:
        family: one of :data:`TINY_FAMILIES` (``"gpt_neox"`` is the parallel, Pythia-style block).
        seed: seeds the weights (the same seed gives the same model).
        **overrides: ``n_layers``, ``d_model``, ``n_heads``, ``n_kv_heads``, ``d_mlp``, ``d_head``,
            or any HF config key of the family (e.g. ``use_parallel_residual=False``).

    Returns:
        ``(hf_model, tokenizer)``: the model in eval mode with eager attention, and :func:`tiny_tokenizer`.
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
