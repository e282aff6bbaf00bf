"""Tiny models with a known number mechanism, built by hand, for the planted-answer tests of mathcircuits.numbers.

* :func:`number_tokenizer`: a word-level tokenizer in which every number 0–99 is one token (the GPT-2 / Llama 3
  kind), so embeddings can carry a planted structure along the number axis;
* :func:`planted_embedding_model`: a tiny Llama whose number embeddings carry a planted period, parity direction
  or helix (or nothing: the control);
* :func:`adder_model`: a two-block Llama that really adds single digits ``a + b`` (0–4) with the character
  tokenizer: in block 1 one head copies ``a``'s digit and one copies ``b``'s to the last position (RoPE offsets),
  ten MLP neurons fire on ``a = i`` / ``b = j`` and add ``2ci`` / ``2cj`` to the logit of digit ``c``, an
  always-on neuron adds ``− c²`` (so the logit ``2c(a+b) − c²`` is largest at ``c = a + b``), and one more neuron,
  wired to fire on ``a mod 2 = 0``, writes nothing.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, pre_tokenizers
from tokenizers import models as tokenizer_models
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from mathcircuits.models import from_hf
from mathcircuits.models.tiny import tiny_tokenizer
from mathcircuits.numbers.helix import helix_basis

SYMBOLS = [" ", "+", "-", "*", "/", "=", "\n", ":", "x", "y", "z"]


def number_tokenizer(folder: Path):
    """Numbers 0–99 as single tokens, plus spaces and operators (saved to ``folder``, as the bridge re-opens it)."""
    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", *map(str, range(100)), *SYMBOLS])}
    core = Tokenizer(tokenizer_models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"\d+|\s|[^\d\s]"), "isolated")
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>"
    )
    tok.save_pretrained(folder)
    return AutoTokenizer.from_pretrained(str(folder))


def _llama(vocab: int, n_layers: int, seed: int, rope_theta: float = 10000.0, d_mlp: int = 128) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=d_mlp,
        num_hidden_layers=n_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        rope_theta=rope_theta,
        rms_norm_eps=1e-6,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        attn_implementation="eager",
    )
    model = LlamaForCausalLM(cfg)
    model.config.architectures = ["LlamaForCausalLM"]
    return model.eval()


def planted_embedding_model(folder: Path, plant: str | None, seed: int = 0, strength: float = 3.0):
    """A tiny two-block Llama with single-token numbers; ``plant`` in the number embeddings:

    ``"period10"``: ``cos, sin(2πn/10)`` on two dimensions; ``"parity"``: ``(−1)^n`` on one dimension;
    ``"helix"``: the 8 helix columns of :func:`helix_basis` (periods 2, 5, 10, 100) on a random 8-dim subspace
    (returned as the third value); ``None``: random embeddings only (the control).
    """
    tok = number_tokenizer(folder)
    model = _llama(len(tok), 2, seed)
    gen = torch.Generator().manual_seed(seed + 7)
    ids = [tok.convert_tokens_to_ids(str(n)) for n in range(100)]
    n = torch.arange(100, dtype=torch.float32)
    planted = None
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb.copy_(torch.randn(emb.shape, generator=gen) * 0.5)
        if plant == "period10":
            emb[ids, 0] += strength * torch.cos(2 * math.pi * n / 10)
            emb[ids, 1] += strength * torch.sin(2 * math.pi * n / 10)
        elif plant == "parity":
            emb[ids, 2] += strength * (1 - 2 * (n % 2))
        elif plant == "helix":
            basis, _ = helix_basis(range(100), (2, 5, 10, 100))
            planted, _ = torch.linalg.qr(torch.randn(64, basis.shape[1], generator=gen))
            emb[ids] += strength * (basis.float() - basis.float().mean(0)) @ planted.T
        elif plant is not None:
            raise ValueError(plant)
    return from_hf(model, tok), tok, planted


def _silu(z: float) -> float:
    return z / (1 + math.exp(-z))


def adder_model(parity: bool = True, d_mlp: int = 128):
    """The hand-wired single-digit adder described in the module docstring (character tokenizer); ``d_mlp`` neurons
    per layer, of which 12 are wired (the rest never fire)."""
    tok = tiny_tokenizer()
    model = _llama(len(tok), 2, seed=0, rope_theta=10.0, d_mlp=d_mlp)
    digit = [tok.convert_tokens_to_ids(str(d)) for d in range(10)]
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in (
            model.model.norm,
            *(m for b in model.model.layers for m in (b.input_layernorm, b.post_attention_layernorm)),
        ):
            norm.weight.fill_(1.0)
        s = 1.0
        emb = model.get_input_embeddings().weight  # every token: two unit entries, so every norm scales alike
        emb[:, 63] = s
        emb[:, 62] = s
        for d, t in enumerate(digit):
            emb[t, 62] = 0.0
            emb[t, d] = s
        att = model.model.layers[1].self_attn
        theta = 10.0 ** (-torch.arange(8, dtype=torch.float64) / 8)  # rope_theta 10, head_dim 16
        amp = 12.0
        for head, offset in ((0, 7), (1, 3)):  # "a + b = ": a sits 7 before the last token, b 3 before
            att.q_proj.weight[head * 16 : head * 16 + 8, 63] = (amp * torch.cos(theta * offset)).float()
            att.q_proj.weight[head * 16 + 8 : head * 16 + 16, 63] = (-amp * torch.sin(theta * offset)).float()
        att.k_proj.weight[0:8, 63] = amp  # KV group 0 (heads 0, 1): a constant key, rotated by position
        for d in range(10):
            att.v_proj.weight[d, d] = 1.0  # the digit's identity
            att.o_proj.weight[10 + d, d] = 1.0  # head 0 writes a's digit to dims 10…19
            att.o_proj.weight[20 + d, 16 + d] = 1.0  # head 1 writes b's digit to dims 20…29
        mlp = model.model.layers[1].mlp
        g = 6.0
        c = torch.arange(10, dtype=torch.float32)
        x63 = 1 / math.sqrt(66 / 64)  # the normalised constant at the last position (two copied digits of √32)
        slot = math.sqrt(32) * x63
        act_op = _silu(g * slot - 2.8 * g * x63) * x63  # an operand neuron's activation when it fires
        act_on = _silu(20.0 * x63) * x63  # the always-on neuron's activation
        for i in range(5):
            for row, dim in ((i, 10 + i), (5 + i, 20 + i)):
                mlp.gate_proj.weight[row, dim] = g
                mlp.gate_proj.weight[row, 63] = -2.8 * g  # threshold halfway to the copied digit's value
                mlp.up_proj.weight[row, 63] = 1.0
                mlp.down_proj.weight[30:40, row] = 2 * c * i / act_op  # + 2ci to the logit of digit c
        mlp.gate_proj.weight[11, 63] = 20.0  # always on: − c² to the logit of digit c (its mean is itself)
        mlp.up_proj.weight[11, 63] = 1.0
        mlp.down_proj.weight[30:40, 11] = -(c**2) / act_on
        if parity:
            mlp.gate_proj.weight[10, [10, 12, 14, 16, 18]] = g
            mlp.gate_proj.weight[10, 63] = -2.8 * g
            mlp.up_proj.weight[10, 63] = 1.0
        head = model.get_output_embeddings().weight
        head[:, 63] = -500.0  # every non-digit token below the digits
        for d, t in enumerate(digit):
            head[t, 63] = 0.0
            head[t, 30 + d] = 100.0
    return from_hf(model, tok)
