"""Tiny random models built offline, for fast tests and teaching.

Following penzai's consistency tests: a few layers, a small hidden size, and a
character-level tokenizer that covers digits, operators, letters and the
punctuation of the templates, so every template tokenizes without a download.
"""

from __future__ import annotations

import string

import torch

from mathcircuits._io import atomic_dir
from mathcircuits.models.embedded import cache_root

__all__ = ["tiny_tokenizer", "tiny_llama", "tiny_gpt2", "TINY_CHARS"]

TINY_CHARS = string.digits + string.ascii_letters + " +-*/^=<>@#&$|~%!?:.,;'\"()\n_"
_SPECIAL = ["<unk>", "<s>", "</s>"]


def tiny_tokenizer():
    """A character-level fast tokenizer (one token per character), cached on disk.

    It is saved to and loaded from a folder because TransformerLens re-opens a
    tokenizer by its ``name_or_path``.
    """
    from transformers import AutoTokenizer

    folder = cache_root() / "tiny-char-tokenizer-v2"
    if not (folder / "tokenizer.json").exists():
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        vocab = {tok: i for i, tok in enumerate(_SPECIAL + list(TINY_CHARS))}
        core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
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
    """A random Llama-style model with grouped-query attention (eager attention)."""
    from transformers import LlamaConfig, LlamaForCausalLM

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
    """A random GPT-2-style model (fused QKV in a Conv1D, learned positions, LayerNorm)."""
    from transformers import GPT2Config, GPT2LMHeadModel

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
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * (1.0 / p.shape[-1] ** 0.5) * 1.5)
