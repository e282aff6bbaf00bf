"""A tiny Llama with a planted two-step circuit: the known answer that circuit analyses must recover.

The task: copy the prompt's one digit (``"a6hxd="`` → ``6``). The plant: a layer-0 head at the marker ``x``
attends to the digit and writes its identity into the marker's residual (:data:`MOVER`); a layer-2 head at
the last token attends to the marker and writes the digit into the answer (:data:`READER`). Every other head
and MLP writes only into noise dimensions the unembedding ignores. Operand counterfactuals (another digit)
change the answer; discovery from the logits must find the reader, then the mover through the reader's
value at the marker; the two-head circuit carries the whole behaviour.

Usage::

    model = load_model("tiny-llama"); plant_two_step(model)
    pairs = copy_pairs(model.tokenizer, 16, seed=0)
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

import torch

from mathcircuits.data import PairSet
from mathcircuits.data.tokenizer_id import Tokenizer, tokenizer_fingerprint
from mathcircuits.models import Head, HookedModel

__all__ = [
    "copy_pairs",
    "plant_two_step",
]

MOVER, READER = Head(0, 1), Head(2, 2)  # (layer, head): the digit is moved to the marker, then read at the last token
CANCELLING = (Head(1, 0), Head(1, 1))  # one KV group of layer 1: +16 and -16 of the digit into the answer
EITHER = (Head(1, 2), Head(1, 3))  # one KV group of layer 1: each flags the marker, their layer's MLP ORs the flags
PARITY = (Head(1, 0),)  # a layer-1 head that writes the digit into the answer, up if it is even, down if odd
PARITY_GAIN = 2.0  # half a lone reader's strength: the answer stays the digit's either way
FLAG, RAMP, ONE = 0.005, 8000.0, 0.02  # a flag's size in dim 50; the OR's gate gain; its write into the answer dims
TEMPLATES = {"t1": "{p}{A}{q}x{r}=", "t2": "{p}{q}{A}x{r}="}


def plant_two_step(model: HookedModel) -> None:
    """Overwrite a tiny Llama (``load_model("tiny-llama")``: 3 layers, 4 heads, 2 KV groups, d_model 64) in place.

    Residual dims: 0-9 the digit, 10 "is a digit", 11 "is the marker", 12 "is '='", 63 a constant; 40-49 the
    moved digit; 20-29 the answer (read by the unembedding); 30-39 noise. Attention is by content: queries and
    keys use the slowest rotary pair, which turns by < 0.01 rad over these prompts.
    """
    plant_copy(model)


def plant_copy(
    model: HookedModel,
    readers: Sequence[tuple[int, int]] = (READER,),
    mlp_writer: bool = False,
    diffuse: bool = False,
    cancelling: Sequence[tuple[int, int]] = (),
    either: Sequence[tuple[int, int]] = (),
    parity: Sequence[tuple[int, int]] = (),
) -> None:
    """Overwrite a tiny Llama in place with a copy circuit of a chosen shape (:func:`plant_two_step` is the default).

    The :data:`MOVER` moves the digit to the marker (dims 40-49); each reader at the last token attends to
    the marker and copies 40-49 out, ``4 / len(readers)`` of the strength each; everything else writes noise
    dims 30-39. ``mlp_writer``: the readers write dims 50-59, which their layer's MLP turns into the answer
    dims 20-29 (the MLP writes the answer *because* of the readers). ``diffuse``: no circuit: every head
    attends from the last token to the digit and writes ``1 / n_heads`` of the answer (``readers`` ignored).
    ``cancelling``: two heads of one KV group (a layer without planted heads) that attend from the last token to
    the digit and write it into the answer at four times a lone reader's strength, the second with the opposite sign: in
    the model they cancel, alone each matters most (:data:`CANCELLING`).
    ``either``: two heads of one KV group that attend from the last token to the marker's slot (``x`` or ``y``,
    dim 13) and flag an ``x`` (dim 11) into dim 50; their layer's MLP turns "at least one flag" into the answer
    ``1`` over ``0`` (two SwiGLU units, a ramp that is flat from one flag on): in the model either head alone
    carries the whole answer, so patching one alone changes nothing (:data:`EITHER`, with
    ``copy_pairs(..., counterfactual="marker")`` and ``readers=()``).
    ``parity``: heads (a layer without other planted heads) that attend from the last token to the digit and write
    it into the answer, ``+PARITY_GAIN`` for an even digit and ``−PARITY_GAIN`` for an odd one: patched, such a head
    moves the logit difference one way in a pair of two even digits, the other way in a pair of two odd ones, and
    not at all in a mixed pair, so its effect's mean over pairs can be 0 while it acts in every pair
    (:data:`PARITY`).
    """
    params = {n.replace("._original_component", ""): p for n, p in model.hf_model.named_parameters()}
    spec = model.spec
    dh, group = spec.d_head, spec.n_heads // spec.n_kv_heads
    slow = dh // 2 - 1  # the slowest rotary pair: attention by content only
    tok = model.tokenizer
    digits = tok.convert_tokens_to_ids(list("0123456789"))
    gen = torch.Generator().manual_seed(0)
    noise = slice(30, 40)
    n_all = spec.n_layers * spec.n_heads
    readers = [tuple(r) for r in readers]

    def rand(*shape: int, scale: float = 0.3) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device="cpu") * scale

    cancelling, either, parity = ([tuple(h) for h in x] for x in (cancelling, either, parity))
    planted = set() if diffuse else {MOVER, *readers, *cancelling, *either, *parity}
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(torch.ones_like(p) if name.endswith("norm.weight") else torch.zeros_like(p))
        emb = params["model.embed_tokens.weight"]
        emb[:, 63] = 1.0
        emb[tok.convert_tokens_to_ids("x"), 11] = 1.0
        emb[tok.convert_tokens_to_ids("="), 12] = 1.0
        if either:  # the marker's slot holds x or y: the flagging heads find it either way
            emb[tok.convert_tokens_to_ids(["x", "y"]), 13] = 1.0
            emb[:, 62] = 4.0  # a large constant: the norms barely move with the noise heads' writes
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
                if (layer, h) in cancelling or (layer, h) in parity:  # at '=': attend to the digit, write it
                    q[h * dh + slow, 12] = 8.0
                    k[g * dh + slow, 10] = 8.0
                    for j in range(10):
                        v[g * dh + j, j] = 1.0
                        if (layer, h) in parity:  # up if even, down if odd
                            o[20 + j, h * dh + j] = PARITY_GAIN * (1.0 if j % 2 == 0 else -1.0)
                        else:  # ±16 (the cancelling pair sums to 0)
                            o[20 + j, h * dh + j] = 16.0 * (1.0 if (layer, h) == tuple(cancelling[0]) else -1.0)
                    continue
                if (layer, h) in either:  # at '=': attend to the marker's slot, flag an x into dim 50
                    q[h * dh + slow, 12] = 8.0
                    k[g * dh + slow, 13] = 8.0
                    v[g * dh, 11] = 1.0
                    o[50, h * dh] = FLAG
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
            if any(l == layer for l, _ in either):  # "at least one flag": a ramp over 0.1-0.4 of one flag, flat after
                for j, at in enumerate((0.1, 0.4)):
                    gate[j] = 0.0
                    gate[j, 50], gate[j, 63] = RAMP, -RAMP * FLAG * at
                    up[j] = 0.0
                    up[j, 63] = 1.0
                    down[:, j] = 0.0
                    down[21, j], down[20, j] = (ONE, -ONE) if j == 0 else (-ONE, ONE)  # the answer 1 over 0


def copy_pairs(
    tokenizer: Tokenizer,
    n: int,
    seed: int,
    same: bool = False,
    counterfactual: Literal["digit", "marker"] = "digit",
) -> PairSet:
    """Copy-the-digit prompts of two layouts (templates ``t1``, ``t2``) with the columns circuit functions read.

    Roles ``A`` = the digit, ``op`` = the marker. ``same``: the counterfactual is the prompt itself (a zero
    denominator). ``counterfactual="marker"``: the task of ``plant_copy(..., either=EITHER)``: is there an
    ``x``? The counterfactual writes ``y`` in its place; the answer is ``1``, the counterfactual's ``0``.
    """
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        tid = ("t1", "t2")[i % 2]
        d, other = rng.sample(range(10), 2)
        p, q, r = rng.choices("abcdefgh", k=3)
        prompt = TEMPLATES[tid].format(p=p, q=q, r=r, A=d)
        if counterfactual == "marker":
            cf, answer, cf_answer = prompt.replace("x", "y"), "1", "0"
        else:
            cf, answer, cf_answer = TEMPLATES[tid].format(p=p, q=q, r=r, A=other), str(d), str(other)
        cf = prompt if same else cf
        ids, cf_ids = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in (prompt, cf))
        ans = tokenizer(answer, add_special_tokens=False)["input_ids"]
        cf_ans = ans if same else tokenizer(cf_answer, add_special_tokens=False)["input_ids"]
        rows.append({
            "prompt": prompt, "cf_prompt": cf, "answer": answer, "tokens": ids, "cf_tokens": cf_ids,
            "cf_answer_tokens": cf_ans,
            "answer_token": ans[0], "answer_tokens": ans, "n_tokens": len(ids), "operation": "copy",
            "template_id": tid, "a": d, "b": seed * 1000 + i, "prefix_len": 0, "pos_a": prompt.index(str(d)),
            "pos_op": prompt.index("x"), "pos_b": prompt.index("x") + 1, "pos_last": len(ids) - 1, "pair_id": i,
        })  # fmt: skip
    fp = tokenizer_fingerprint(tokenizer)  # the pairs carry their tokenizer (PairSet.require_model)
    return PairSet.from_rows([{**row, "tokenizer": fp} for row in rows])
