"""Tiny Llamas with a planted copy circuit whose shape we choose: the known answers the claims' rules must read.

The task is :mod:`mathcircuits.circuit.planted`'s (copy the prompt's one digit, ``"a6hxd="`` → ``6``; prompts from
:func:`~mathcircuits.circuit.copy_pairs`), and so is the mechanism: a *mover* head at the marker ``x`` attends to
the digit and writes its identity into residual dims 40-49; one or more *reader* heads at the last token attend
to the marker and copy 40-49 out. Here we choose

* where the readers sit (``readers``): in the middle of a deep model, or in its last layer;
* where the readers write: straight into the answer dims 20-29 that the unembedding reads, or (``mlp_writer``)
  into dims 50-59, which the MLP of that layer turns into the answer (so the MLPs write the answer *because*
  of the readers);
* or no circuit at all but **diffuse** copying (``diffuse=True``): every head of every layer attends from the last
  token to the digit and writes a 1/n share of the answer.

Every other head and MLP writes only noise dims 30-39, which the unembedding ignores.

:func:`role_model` adds to the 3-layer plant what claim C3 tells apart: besides the reader (2, 2), which attends
from ``=`` to the marker (an *operator* head), head (2, 0) attends from ``=`` to the digit (an *operand* head), and
its layer-mate (2, 1) parks most of its attention on the first token ``<s>`` (an attention sink, as most heads of
real models do) and spends the rest on the digit (``sink_mate="digit"``) or on the other tokens alike
(``"spread"``). :func:`role_pairs` writes the copy prompts after ``<s>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import datasets
import torch

from mathcircuits.circuit import copy_pairs
from mathcircuits.circuit.planted import MOVER, plant_copy
from mathcircuits.data import PairSet
from mathcircuits.models import HookedModel, from_hf
from mathcircuits.models.tiny import tiny_llama

__all__ = ["MOVER", "planted_model", "role_model", "role_pairs"]

SINK_DIM = 13  # a residual dim only the first token <s> has


def planted_model(
    n_layers: int = 3,
    readers: Sequence[tuple[int, int]] = ((2, 2),),
    mlp_writer: bool = False,
    diffuse: bool = False,
    n_heads: int = 4,
) -> HookedModel:
    """A tiny Llama (``n_heads`` heads in ``n_heads / 2`` KV groups per layer, d_head 16: d_model 64 for 4 heads)
    with the chosen plant (:func:`mathcircuits.circuit.planted.plant_copy`). 8 heads leave enough depth-matched
    random sets
    (49 for a key set in two layers) for a p-value below 0.05; 4 heads leave 9."""
    hf, tok = tiny_llama(seed=0, n_layers=n_layers, d_model=16 * n_heads, n_heads=n_heads, n_kv_heads=n_heads // 2)
    model = from_hf(hf, tok, name=f"planted-{n_layers}" + (f"x{n_heads}" if n_heads != 4 else ""))
    plant_copy(model, readers, mlp_writer, diffuse)
    return model


def role_model(sink_mates: Literal["digit", "spread"], operand_gain: float = 8.0) -> HookedModel:
    """The 3-layer plant with an operand head (2, 0), an operator head (2, 2) and sink-heavy layer-mates.

    ``"digit"``: both other heads of layer 2, (2, 1) and (2, 3), park about 80% of their attention on ``<s>`` and
    spend the rest on the digit; ``"spread"``: (2, 1) parks most of it on ``<s>`` and spreads the rest, (2, 3)
    keeps its random query. Queries and keys use the slowest rotary pairs (attention by content);
    ``operand_gain`` sets how sharply (2, 0) attends to the digit (8: all of it; 1: about 40%).
    """
    model = planted_model(3, readers=((2, 2),))
    params = {n.replace("._original_component", ""): p for n, p in model.hf_model.named_parameters()}
    dh = model.spec.d_head
    sink_pair, digit_pair = dh // 2 - 2, dh // 2 - 3  # the next-slowest rotary pairs (the reader has the slowest)
    bos = model.tokenizer.bos_token_id
    with torch.no_grad():
        params["model.embed_tokens.weight"][bos, SINK_DIM] = 1.0
        q, k = params["model.layers.2.self_attn.q_proj.weight"], params["model.layers.2.self_attn.k_proj.weight"]
        q[: 2 * dh] = 0.0  # heads 0 and 1 (KV group 0) attend by the keys below only
        k[:dh] = 0.0
        mates = (1, 3) if sink_mates == "digit" else (1,)
        for g in {h // 2 for h in (0, *mates)}:  # keys "is a digit" and "is the first token" (the reader's stays)
            k[g * dh + digit_pair, 10] = 8.0
            k[g * dh + sink_pair, SINK_DIM] = 8.0
        q[digit_pair, 12] = operand_gain  # head 0, at '=': the digit
        for h in mates:
            q[h * dh : (h + 1) * dh] = 0.0
            q[h * dh + sink_pair, 12] = 8.0 if sink_mates == "digit" else 2.1  # the sink...
            if sink_mates == "digit":
                q[h * dh + digit_pair, 12] = 7.95  # ...and the digit, a little less
    return model


def role_pairs(model: HookedModel, n: int = 24, seed: int = 0) -> datasets.Dataset:
    """The copy prompts after ``<s>`` with role positions as lists: the digit is operand A, the letter after the
    marker operand B, the marker the operator; ``<s>`` is the first token, the sink."""
    bos = model.tokenizer.bos_token_id

    def shift(r: dict) -> dict:
        return {
            "tokens": [bos, *r["tokens"]],
            "n_tokens": r["n_tokens"] + 1,
            "pos_last": r["pos_last"] + 1,
            **{k: [r[k] + 1] for k in ("pos_a", "pos_b", "pos_op")},
        }

    return PairSet(copy_pairs(model.tokenizer, n, seed).dataset.map(shift))
