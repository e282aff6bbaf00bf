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
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mathcircuits.models import HookedModel, from_hf, tiny_llama

MOVER = (0, 1)


def planted_model(
    n_layers: int = 3,
    readers: Sequence[tuple[int, int]] = ((2, 2),),
    mlp_writer: bool = False,
    diffuse: bool = False,
) -> HookedModel:
    """A tiny Llama (4 heads in 2 KV groups per layer, d_model 64) with the chosen plant."""
    hf, tok = tiny_llama(seed=0, n_layers=n_layers)
    model = from_hf(hf, tok, name=f"planted-{n_layers}")
    _plant(model, [tuple(r) for r in readers], mlp_writer, diffuse)
    return model


def _plant(model: HookedModel, readers: list[tuple[int, int]], mlp_writer: bool, diffuse: bool) -> None:
    params = {n.replace("._original_component", ""): p for n, p in model.hf_model.named_parameters()}
    spec = model.spec
    dh, group = spec.d_head, spec.n_heads // spec.n_kv_heads
    slow = dh // 2 - 1  # the slowest rotary pair: attention by content only
    tok = model.tokenizer
    digits = tok.convert_tokens_to_ids(list("0123456789"))
    gen = torch.Generator().manual_seed(0)
    noise = slice(30, 40)
    n_all = spec.n_layers * spec.n_heads

    def rand(*shape, scale=0.3):
        return torch.randn(*shape, generator=gen) * scale

    planted = set() if diffuse else {MOVER, *readers}
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(torch.ones_like(p) if name.endswith("norm.weight") else torch.zeros_like(p))
        emb = params["model.embed_tokens.weight"]
        emb[:, 63] = 1.0
        emb[tok.convert_tokens_to_ids("x"), 11] = 1.0
        emb[tok.convert_tokens_to_ids("="), 12] = 1.0
        for j, t in enumerate(digits):
            emb[t, j] = emb[t, 10] = 1.0
            params["lm_head.weight"][t, 20 + j] = 3.0
        for layer in range(spec.n_layers):
            pre = f"model.layers.{layer}."
            q, k, v, o = (params[f"{pre}self_attn.{x}_proj.weight"] for x in "qkvo")
            groups = {h // group for (l, h) in planted if l == layer}
            for h in range(spec.n_heads):
                g, rows = h // group, slice(h * dh, (h + 1) * dh)
                if diffuse:  # at '=': attend to the digit, write a 1/n share of the answer
                    q[h * dh + slow, 12] = 8.0
                    k[g * dh + slow, 10] = 8.0
                    for j in range(10):
                        v[g * dh + j, j] = 1.0
                        o[20 + j, h * dh + j] = 40.0 / n_all
                    continue
                if (layer, h) == MOVER:  # at the marker: attend to the digit, write its identity to 40-49
                    q[h * dh + slow, 11] = 4.0
                    k[g * dh + slow, 10] = 4.0
                    for j in range(10):
                        v[g * dh + j, j] = 1.0
                        o[40 + j, h * dh + j] = 1.0
                    continue
                if (layer, h) in readers:  # at '=': attend to the marker, copy 40-49 out
                    q[h * dh + slow, 12] = 8.0
                    k[g * dh + slow, 11] = 8.0
                    out = 50 if mlp_writer else 20
                    for j in range(10):
                        v[g * dh + j, 40 + j] = 1.0
                        o[out + j, h * dh + j] = 4.0 / len(readers)
                    continue
                q[rows] = rand(dh, spec.d_model)
                o[noise, rows] = rand(10, dh, scale=0.05)
                if g not in groups:
                    k[g * dh : (g + 1) * dh] = rand(dh, spec.d_model)
                    v[g * dh : (g + 1) * dh] = rand(dh, spec.d_model)
            gate, up = params[f"{pre}mlp.gate_proj.weight"], params[f"{pre}mlp.up_proj.weight"]
            down = params[f"{pre}mlp.down_proj.weight"]
            gate.copy_(rand(spec.d_mlp, spec.d_model))
            up.copy_(rand(spec.d_mlp, spec.d_model))
            down[noise] = rand(10, spec.d_mlp, scale=0.05)
            if mlp_writer and any(l == layer for l, _ in readers):  # hidden unit j: dims 50+j → answer dim 20+j
                for j in range(10):
                    gate[j] = 0.0
                    gate[j, 63] = 20.0
                    up[j] = 0.0
                    up[j, 50 + j] = 4.0
                    down[:, j] = 0.0
                    down[20 + j, j] = 3.0
