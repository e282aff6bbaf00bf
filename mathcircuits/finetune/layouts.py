"""Per-family head-slice layouts: where each attention head's weights live in an HF model, as data.

A head is a unit of the computation; an optimizer moves parameters. This table says, per model family, which
features of which HF module belong to one head (in the spirit of TransformerLens' architecture adapters and PEFT's
``utils/constants.py``): code reads it and does not branch on family names. Add a row to support a new family.

Mapping. With ``d = d_head``, query head ``h`` and its KV group ``g = h // (n_heads / n_kv_heads)``, the *unit* of
a role is ``h`` for q and o, ``g`` for k and v. q, k, v tune ``d`` output features of the projection (rows of an
``nn.Linear`` weight, columns of GPT-2's ``Conv1D``, and the bias entries); o tunes ``d`` input features of the
output projection (its bias is shared by all heads and never tuned). Where unit ``u``'s features sit depends on
how q, k and v are stored (:attr:`Projection.fused`):

* ``"none"`` — separate modules (Llama, Mistral, Qwen2/3, Gemma 1/2/3, OLMo 2): ``[u·d, (u+1)·d)``;
* ``"blocked"`` — all queries, then all keys, then all values in one module (GPT-2 ``c_attn``, Phi-3
  ``qkv_proj``): the same range shifted by the blocks before it (``n_heads·d`` for k, ``+ n_kv·d`` for v);
* ``"per_head"`` — one module whose output is viewed as ``[n_heads, 3·d]`` and split per head (GPT-NeoX/Pythia
  ``query_key_value``, as transformers' ``GPTNeoXAttention``): ``[u·3d + b·d, u·3d + (b+1)·d)`` for block ``b``
  (0 q, 1 k, 2 v).

Slices that are not head-local are refused, never guessed. OLMo 2 (and 3) apply ``q_norm``/``k_norm``, an RMSNorm
over the *whole* projection output (across heads): changing one head's query rows changes every head's queries,
so q and k are in :attr:`AttentionLayout.not_head_local`; v rows and o columns stay exact. Qwen 3 and Gemma 3
normalise q and k per head, which is head-local. Under grouped-query attention k and v of group ``g`` are shared by
every query head of the group (``kv_policy`` in :mod:`mathcircuits.finetune.slices`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, get_args

import torch
from transformers.pytorch_utils import Conv1D

from mathcircuits.models.heads import Head
from mathcircuits.models.spec import ModelSpec
from mathcircuits.patching import SelectionError

__all__ = [
    "LAYOUTS",
    "KVPolicy",
    "SliceError",
]

#: What precise SFT does with a head's key/value weights when K/V are shared by a group (GQA): see
#: :mod:`mathcircuits.finetune.slices`.
KVPolicy: TypeAlias = Literal["group", "exclusive", "frozen"]
KV_POLICIES: tuple[str, ...] = get_args(KVPolicy)

Role = Literal["q", "k", "v", "o"]
HEAD_ROLES: tuple[str, ...] = ("q", "k", "v", "o")


class SliceError(SelectionError):
    """A selection cannot be mapped onto this model's parameters; the message says why and how to fix it."""


@dataclass(frozen=True)
class Projection:
    """One attention projection of a decoder layer.

    ``module`` is its path inside a decoder layer (``"self_attn.q_proj"``); ``weight`` is ``"out_in"`` for
    ``nn.Linear``, ``"in_out"`` for GPT-2's ``Conv1D``; ``block`` is q (0), k (1) or v (2) in a fused module.
    """

    module: str
    weight: Literal["out_in", "in_out"] = "out_in"
    block: int = 0
    fused: Literal["none", "blocked", "per_head"] = "none"

    def feature_range(self, unit: int, facts: ModelSpec) -> tuple[int, int]:
        """Half-open range of the features of ``unit`` (a head for q/o, a KV group for k/v) in this module.

        Along the module's output features (q/k/v) or input features (o).
        """
        d = facts.d_head
        if self.fused == "per_head":
            if facts.n_kv_heads != facts.n_heads:
                raise SliceError(
                    f"a per-head fused q/k/v projection ({self.module}) with {facts.n_kv_heads} KV heads for "
                    f"{facts.n_heads} query heads is not a known layout. ",
                    "add a layout row for this family.",
                )
            start = unit * 3 * d + self.block * d
            return start, start + d
        offset = 0
        if self.fused == "blocked":
            widths = (facts.n_heads * d, facts.n_kv_heads * d, facts.n_kv_heads * d)
            offset = sum(widths[: self.block])
        return offset + unit * d, offset + (unit + 1) * d


@dataclass(frozen=True)
class AttentionLayout:
    """Where the attention projections and the MLP of decoder layer ``l`` live, and what is not head-local.

    ``not_head_local``: role → why its slice would change other heads too (such roles are refused). ``gqa=False``:
    the family ignores a config's ``num_key_value_heads``, and so does :func:`model_facts`.
    """

    layers: str
    q: Projection
    k: Projection
    v: Projection
    o: Projection
    mlp: str
    not_head_local: dict[str, str] = field(default_factory=dict, hash=False)
    gqa: bool = True

    def projection(self, role: Role) -> Projection:
        return {"q": self.q, "k": self.k, "v": self.v, "o": self.o}[role]

    def check_roles(self, roles: Iterable[str], model_type: str) -> tuple[str, ...]:
        """``roles`` as a tuple, or an error if one is unknown or not head-local in this family."""
        roles = tuple(roles)
        if not roles or any(r not in HEAD_ROLES for r in roles):
            raise SliceError(
                f"roles={roles!r} is not a non-empty subset of {HEAD_ROLES}. ", "e.g. roles=('q', 'k', 'v', 'o')."
            )
        refused = {r: self.not_head_local[r] for r in roles if r in self.not_head_local}
        if refused:
            allowed = tuple(r for r in HEAD_ROLES if r not in self.not_head_local)
            reasons = "; ".join(f"{r}: {why}" for r, why in refused.items())
            raise SliceError(
                f"the {sorted(refused)} slices of a {model_type!r} head are not head-local ({reasons}), so tuning "
                f"them would not be precise SFT of that head. ",
                f"head_slices(model, key, roles={allowed!r}) and pass the resulting SliceSet to train_sft as key.",
            )
        return roles


def _separate(layers: str = "model.layers", attn: str = "self_attn", out: str = "o_proj", **kw: Any) -> AttentionLayout:
    return AttentionLayout(
        layers=layers,
        q=Projection(f"{attn}.q_proj"),
        k=Projection(f"{attn}.k_proj"),
        v=Projection(f"{attn}.v_proj"),
        o=Projection(f"{attn}.{out}"),
        mlp="mlp",
        **kw,
    )


def _fused(
    layers: str,
    qkv: str,
    out: str,
    fused: Literal["blocked", "per_head"],
    weight: Literal["out_in", "in_out"] = "out_in",
) -> AttentionLayout:
    q, k, v = (Projection(qkv, weight, block=b, fused=fused) for b in range(3))
    return AttentionLayout(layers=layers, q=q, k=k, v=v, o=Projection(out, weight), mlp="mlp", gqa=fused == "blocked")


_WHOLE_QK_NORM = (
    "{family} applies {norm} as one RMSNorm over the whole projection output (all heads' features together), "
    "so changing one head's {role} rows rescales every head's {what}"
)
_OLMO2 = _separate(
    not_head_local={
        "q": _WHOLE_QK_NORM.format(family="OLMo 2/3", norm="q_norm", role="query", what="queries"),
        "k": _WHOLE_QK_NORM.format(family="OLMo 2/3", norm="k_norm", role="key", what="keys"),
    }
)

#: ``config.model_type`` → layout. Llama-style models (incl. SmolLM2) share one row.
LAYOUTS: dict[str, AttentionLayout] = {
    "llama": _separate(),
    "mistral": _separate(),
    "qwen2": _separate(),  # q/k/v carry biases: sliced like the weight rows
    "qwen3": _separate(),  # q_norm/k_norm act per head on d_head features (head-local), shared weights not tuned
    "gemma": _separate(),
    "gemma2": _separate(),  # post-attention norm acts after o_proj: o columns still write only their head's part
    "gemma3_text": _separate(),  # per-head q_norm/k_norm as Qwen 3, sandwich norms as Gemma 2
    "olmo": _separate(),  # optional clip_qkv clamps element-wise: head-local
    "olmo2": _OLMO2,
    "olmo3": _OLMO2,
    "stablelm": _separate(),  # optional qk_layernorm is one LayerNorm per head: head-local
    "starcoder2": _separate(),
    "phi": _separate(out="dense"),  # optional q/k LayerNorm over d_head features: head-local
    "gptj": _separate(layers="transformer.h", attn="attn", out="out_proj", gqa=False),
    "phi3": _fused("model.layers", "self_attn.qkv_proj", "self_attn.o_proj", "blocked"),
    "gpt2": dataclasses.replace(_fused("transformer.h", "attn.c_attn", "attn.c_proj", "blocked", "in_out"), gqa=False),
    "gpt_neox": _fused("gpt_neox.layers", "attention.query_key_value", "attention.dense", "per_head"),
}


def resolve_layout(model: torch.nn.Module) -> AttentionLayout:
    """The layout of ``model`` (an HF causal LM), or an error naming the family and what is missing."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if any(name.endswith("._original_component") for name, _ in model.named_modules()):
        raise SliceError(
            f"this {type(model).__name__} is inside a TransformerBridge (booting replaced its modules in place), so "
            "its parameters are not where the HF layout says. ",
            "use hooked_model.plain_hf_model() or load_hf_model(source) for a plain copy to fine-tune.",
        )
    if model_type not in LAYOUTS:
        raise SliceError(
            f"family {model_type!r} ({type(model).__name__}) has no head-slice layout: mathcircuits does not know "
            f"where its heads' q/k/v/o features are. Supported: {sorted(LAYOUTS)}. ",
            "add a row to "
            "mathcircuits.finetune.layouts.LAYOUTS (module paths and how q/k/v are fused), after checking that "
            "each head's slice changes only that head (tests/test_slices_families.py).",
        )
    return LAYOUTS[model_type]


def model_facts(model: torch.nn.Module, name: str | None = None) -> ModelSpec:
    """The :class:`~mathcircuits.models.ModelSpec` of an HF model, as the slice mapping reads it.

    ``name``: the name the model had when key components were selected (default ``config.name_or_path``). A family
    whose layout has no grouped K/V (``gqa=False``) reports one KV head per query head.
    """
    facts = ModelSpec.from_hf(model, name)
    layout = LAYOUTS.get(str(model.config.model_type))
    if layout is not None and not layout.gqa:
        facts = dataclasses.replace(facts, n_kv_heads=facts.n_heads)
    return facts


def kv_groups(heads: Sequence[Head], facts: ModelSpec, kv_policy: KVPolicy) -> list[tuple[int, int]]:
    """The sorted ``(layer, group)`` pairs whose shared K/V are tuned for ``heads`` under ``kv_policy``."""
    group_size = facts.n_heads // facts.n_kv_heads
    chosen = set(heads)
    groups = sorted({(l, h // group_size) for l, h in heads})
    if kv_policy == "frozen":
        return []
    if kv_policy == "exclusive":
        return [(l, g) for l, g in groups if all((l, g * group_size + i) in chosen for i in range(group_size))]
    return groups


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Half-open ranges sorted, with overlapping or touching ones merged (``[(0, 2), (2, 4)]`` → ``((0, 4),)``)."""
    out: list[list[int]] = []
    for a, b in sorted(set(ranges)):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def module_orientation(module: torch.nn.Module) -> Literal["out_in", "in_out"]:
    """``"in_out"`` for GPT-2's ``Conv1D`` (weight ``[in, out]``), ``"out_in"`` for ``nn.Linear``; others refused."""
    if isinstance(module, torch.nn.Linear):
        return "out_in"
    if isinstance(module, Conv1D):
        return "in_out"
    raise SliceError(
        f"module {type(module).__name__} has parameters but is neither nn.Linear nor Conv1D; "
        "precise SFT can only tune linear layers. ",
        "select another MLP or extend mathcircuits.finetune.adapter.",
    )
