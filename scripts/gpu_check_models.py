"""The device check's shapes, the random-weight models built from them, and the pairs they run on.

``SHAPES`` and the floor's arithmetic (:func:`floor_per_pair`) are explained in ``gpu_check.py``'s docstring.
"""

from __future__ import annotations

from typing import Any

import torch

#: shape name → LlamaConfig sizes, on the device and in the dry run.
SHAPES: dict[str, dict[str, dict[str, int]]] = {
    "llama2-7b": {
        "device": dict(layers=32, heads=32, kv_heads=32, d_model=4096, d_mlp=11008),
        "dry": dict(layers=2, heads=4, kv_heads=4, d_model=64, d_mlp=128),
    },
    "llama3-8b": {
        "device": dict(layers=32, heads=32, kv_heads=8, d_model=4096, d_mlp=14336),
        "dry": dict(layers=2, heads=4, kv_heads=2, d_model=64, d_mlp=176),
    },
    "ft-1b": {
        "device": dict(layers=16, heads=32, kv_heads=8, d_model=2048, d_mlp=8192),
        "dry": dict(layers=2, heads=4, kv_heads=2, d_model=64, d_mlp=128),
    },
}
PEAK_FLOPS = {"bfloat16": 700e12, "float32": 60e12}  # dense peaks assumed for the floor (module docstring)


def shape_label(name: str, shape: dict[str, int], dry: bool) -> str:
    """A row's shape column: the name of the shape on the device; on a dry run, the tiny shape that really ran."""
    if not dry:
        return name
    return f"{shape['layers']}L {shape['heads']}H/{shape['kv_heads']}KV d{shape['d_model']} mlp{shape['d_mlp']}"


def mlp_rows(layers: int, heads: int) -> int:
    """Downstream last-position MLP rows per pair and position: H·L(L+1)/2 for the heads, L(L-1)/2 for the MLPs."""
    return heads * layers * (layers + 1) // 2 + layers * (layers - 1) // 2


def floor_per_pair(shape: dict[str, int], positions: float, dtype: str) -> float:
    """Seconds per pair of the exact scan's MLP rows at the dtype's assumed peak (module docstring)."""
    flops = mlp_rows(shape["layers"], shape["heads"]) * 6 * shape["d_model"] * shape["d_mlp"] * positions
    return flops / PEAK_FLOPS[dtype]


def hf_config(tok: Any, shape: dict[str, int]) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=shape["d_model"],
        intermediate_size=shape["d_mlp"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        max_position_embeddings=2048,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )


def build_hf(tok: Any, shape: dict[str, int], dtype: torch.dtype, device: str, seed: int = 0) -> Any:
    """A random-weight plain HF Llama of ``shape``, made directly on ``device`` in ``dtype`` (eval mode)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(hf_config(tok, shape), dtype=dtype)
    return model.eval()


def build_pair(tok: Any, shape: dict[str, int], device: str, name: str) -> dict[str, Any]:
    """The float32 model and its bf16 copy (same weights, rounded), both wrapped as hooked models."""
    from mathcircuits.models import from_hf

    hf32 = build_hf(tok, shape, torch.float32, device)
    hf16 = build_hf(tok, shape, torch.bfloat16, device, seed=1)
    hf16.load_state_dict(hf32.state_dict())  # cast on copy: the bf16 model is the float32 one, rounded
    return {"float32": from_hf(hf32, tok, name=name), "bfloat16": from_hf(hf16, tok, name=name)}


# --- the stages ---------------------------------------------------------------------------------------------------


def make_pairs(tok: Any, n: int, seed: int = 0, fewshot: bool = True) -> Any:
    """Addition pairs of one template, operands 1-99 (answers of 1-3 digits: ~2.5 answer tokens on SmolLM2).

    The dry run leaves out the few-shot prefix: the character tokenizer makes it ~200 tokens, and bf16 matrix
    products are slow on a CPU.
    """
    from mathcircuits.data import GenerationConfig, generate_pairs, load_templates

    cfg = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=n, operand_range=(1, 99),
                           fewshot=fewshot, seed=seed)  # fmt: skip
    return generate_pairs(tok, load_templates(), cfg)


def mean_positions(pairs: Any) -> float:
    return sum(len(a) for a in pairs.answer_tokens) / len(pairs)
