"""From key heads and MLPs to the exact parameter slices of an HF model.

Background. Zhang et al. (ICML 2024, §5) fine-tune only the components that
path patching found to matter for arithmetic ("precise SFT"). A key component
is a unit of the *computation* (a query head, an MLP); what an optimizer moves
are *parameters*. This module is the bridge: it maps a
:class:`~mathcircuits.patching.selection.KeyComponents` selection to the rows
and columns of the HF weights that compute those components.

Mapping. With ``d = d_head``, query head ``h`` of layer ``l`` and its KV group
``g = h // (n_heads / n_kv_heads)``:

* query:  output features ``[h·d, (h+1)·d)`` of the query projection (rows of
  ``q_proj.weight`` and entries of ``q_proj.bias``);
* output: input features ``[h·d, (h+1)·d)`` of the output projection (columns
  of ``o_proj.weight``; its bias is shared by all heads and never tuned);
* key / value: output features ``[g·d, (g+1)·d)`` of the key and value
  projections. Under grouped-query attention they are **shared** by every head
  of group ``g``, so tuning them changes non-key heads too. ``kv_policy`` says
  what to do:

  - ``"group"`` (default): tune the group's K/V when any of its heads is key
    (closest to the paper, which tuned q, k, v and o of each key head on
    multi-head models, where every group has one head);
  - ``"exclusive"``: tune a group's K/V only when *all* its heads are key, so no
    non-key head's computation changes (same as ``"group"`` without GQA);
  - ``"frozen"``: never tune K/V (query rows and output columns only).

* key MLP ``l``: every parameter of ``layers[l].mlp``, whole.

Fused projections (GPT-2's ``c_attn`` Conv1D, Phi-3's ``qkv_proj``) hold q, k
and v as consecutive blocks of output features; the block offsets come from the
head counts. Weight orientation is per module kind: ``nn.Linear`` stores
``[out, in]`` (``"out_in"``), GPT-2's ``Conv1D`` stores ``[in, out]``
(``"in_out"``). Everything architecture-specific lives in :data:`LAYOUTS`,
a table of module paths — add a row to support a new architecture.

Not supported (refused with an error): architectures whose heads are not
separable in the weights, e.g. GPT-NeoX (q, k, v interleaved per head) or
OLMo-2 (a norm over all heads' queries couples them).

Usage::

    model, tok = load_hf_model("embedded")
    key = KeyComponents.load("key_components.json")
    slices = head_slices(model, key, kv_policy="group", model_name="SmolLM2-135M-Instruct")
    slices.n_tuned, slices.fraction, slices.to_dataframe()
    slices.save("slices.json")
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from mathcircuits._io import SavedResult, decode_fields, encode_fields
from mathcircuits.models.spec import ModelSpec, as_spec, check_model, heads_by_layer
from mathcircuits.patching.selection import KeyComponents, SelectionError

__all__ = [
    "KV_POLICIES",
    "LAYOUTS",
    "AttentionLayout",
    "ParamSlice",
    "Projection",
    "SliceError",
    "SliceSet",
    "head_slices",
    "model_facts",
    "resolve_layout",
]

KVPolicy = Literal["group", "exclusive", "frozen"]
KV_POLICIES: tuple[str, ...] = ("group", "exclusive", "frozen")


class SliceError(SelectionError):
    """A selection cannot be mapped onto this model's parameters; the message says why and how to fix it."""


# ----------------------------------------------------------------------------- layouts (data)


@dataclass(frozen=True)
class Projection:
    """One attention projection: its module path inside a decoder layer, weight orientation, and
    (for fused q/k/v modules) which block of output features it is (0 = q, 1 = k, 2 = v)."""

    module: str
    weight: Literal["out_in", "in_out"] = "out_in"
    block: int = 0


@dataclass(frozen=True)
class AttentionLayout:
    """Where the attention projections and the MLP of decoder layer ``l`` live."""

    layers: str  # path of the ModuleList of decoder layers
    q: Projection
    k: Projection
    v: Projection
    o: Projection
    mlp: str


_LLAMA = AttentionLayout(
    layers="model.layers",
    q=Projection("self_attn.q_proj"),
    k=Projection("self_attn.k_proj"),
    v=Projection("self_attn.v_proj"),
    o=Projection("self_attn.o_proj"),
    mlp="mlp",
)
_PHI3 = AttentionLayout(
    layers="model.layers",
    q=Projection("self_attn.qkv_proj", block=0),
    k=Projection("self_attn.qkv_proj", block=1),
    v=Projection("self_attn.qkv_proj", block=2),
    o=Projection("self_attn.o_proj"),
    mlp="mlp",
)
_GPT2 = AttentionLayout(
    layers="transformer.h",
    q=Projection("attn.c_attn", "in_out", block=0),
    k=Projection("attn.c_attn", "in_out", block=1),
    v=Projection("attn.c_attn", "in_out", block=2),
    o=Projection("attn.c_proj", "in_out"),
    mlp="mlp",
)

#: ``config.model_type`` → layout. Llama-family models (incl. SmolLM2) share one row.
LAYOUTS: dict[str, AttentionLayout] = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "qwen2": _LLAMA,  # q/k/v carry biases: sliced like the weight rows
    "qwen3": _LLAMA,  # q_norm/k_norm act per head on d_head features, shared by heads: not tuned
    "gemma": _LLAMA,
    "gemma2": _LLAMA,
    "phi3": _PHI3,
    "gpt2": _GPT2,
}


def resolve_layout(model: torch.nn.Module) -> AttentionLayout:
    """The layout of ``model`` (an HF causal LM), or a clear error."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in LAYOUTS:
        raise SliceError(
            f"architecture {model_type!r} ({type(model).__name__}) has no head-slice layout. "
            f"Supported: {sorted(LAYOUTS)}. Fix: add a row to mathcircuits.finetune.slices.LAYOUTS "
            "if its heads are separable (q/k/v/o as per-head blocks of features)."
        )
    return LAYOUTS[model_type]


def model_facts(model: torch.nn.Module, name: str | None = None) -> dict[str, Any]:
    """Deprecated: use ``ModelSpec.from_hf(model, name)``; this returns its ``to_dict()``.

    Kept so code that reads ``facts["n_heads"]`` or ``facts["model_type"]`` keeps working; the dict
    has every key it had (name, model_type, architecture, n_layers, n_heads, n_kv_heads, d_head,
    d_model) plus source, d_mlp and vocab_size.
    """
    return ModelSpec.from_hf(model, name).to_dict()


# ----------------------------------------------------------------------------- values


@dataclass(frozen=True)
class ParamSlice:
    """The tuned entries of one HF parameter.

    ``axis`` is the weight axis the ``ranges`` (half-open, sorted, disjoint)
    index; ``axis=None`` means the whole parameter. ``feature`` says whether
    the indexed axis is the module's output or input features.
    """

    name: str  # full parameter name, e.g. "model.layers.14.self_attn.q_proj.weight"
    module: str  # owning module, e.g. "model.layers.14.self_attn.q_proj"
    kind: Literal["weight", "bias"]
    shape: tuple[int, ...]
    axis: int | None
    ranges: tuple[tuple[int, int], ...]
    feature: Literal["out", "in", "all"]
    weight_layout: Literal["out_in", "in_out"]
    layer: int
    roles: tuple[str, ...]  # some of "q", "k", "v", "o", "mlp"

    @property
    def whole(self) -> bool:
        return self.axis is None

    @property
    def n_indices(self) -> int:
        return sum(b - a for a, b in self.ranges)

    @property
    def slice_shape(self) -> tuple[int, ...]:
        """Shape of the tuned block (the delta tensor)."""
        if self.axis is None:
            return self.shape
        return tuple(self.n_indices if i == self.axis else s for i, s in enumerate(self.shape))

    @property
    def n_params(self) -> int:
        n = 1
        for s in self.slice_shape:
            n *= s
        return n

    def indices(self) -> Int[Tensor, " n_indices"]:
        """The tuned indices along ``axis`` as a LongTensor (empty for a whole parameter)."""
        if not self.ranges:
            return torch.zeros(0, dtype=torch.long)
        return torch.cat([torch.arange(a, b, dtype=torch.long) for a, b in self.ranges])

    def mask(self) -> Bool[Tensor, "..."]:
        """Boolean mask of the parameter's shape, True on tuned entries."""
        m = torch.zeros(self.shape, dtype=torch.bool)
        if self.axis is None:
            m[...] = True
        else:
            m.index_fill_(self.axis, self.indices(), True)
        return m

    def to_dict(self) -> dict[str, Any]:
        """The slice as a plain dict of its fields (saved inside a :class:`SliceSet`)."""
        return encode_fields(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ParamSlice":
        """Rebuild from :meth:`to_dict`; an unknown, missing or mistyped field is an error naming it."""
        return decode_fields(cls, d, "a parameter slice")


@dataclass(frozen=True)
class SliceSet(SavedResult):
    """Every parameter slice that precise SFT tunes for a selection, with counts.

    ``n_tuned`` counts tuned scalars, ``n_model_params`` all parameters of the
    model (tied weights once), ``fraction`` their ratio. ``model`` is the
    :class:`~mathcircuits.models.ModelSpec` of the HF model the slices were made for
    (a dict from ``ModelSpec.to_dict()`` is accepted and converted). Saved as JSON by
    ``save("slices.json")``.
    """

    STAGE = "finetune"
    DERIVED = ("n_tuned",)

    model: ModelSpec | dict[str, Any]
    heads: tuple[tuple[int, int], ...]
    mlps: tuple[int, ...]
    kv_policy: str
    slices: tuple[ParamSlice, ...]
    n_model_params: int
    kv_groups: tuple[tuple[int, int], ...] = field(default=())  # (layer, group) whose K/V are tuned

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", as_spec(self.model))

    @classmethod
    def upgrade(cls, version: int, fields: dict[str, Any]) -> dict[str, Any]:
        """Version 1 also stored the derived per-slice ``n_params``: drop it."""
        if isinstance(fields.get("slices"), list):
            fields["slices"] = [{k: v for k, v in s.items() if k != "n_params"} if isinstance(s, dict) else s
                                for s in fields["slices"]]
        return fields

    @property
    def n_tuned(self) -> int:
        return sum(s.n_params for s in self.slices)

    @property
    def fraction(self) -> float:
        return self.n_tuned / self.n_model_params if self.n_model_params else float("nan")

    def heads_by_layer(self) -> dict[int, list[int]]:
        """``{layer: [head, ...]}`` of the tuned heads."""
        return heads_by_layer(self.heads)

    def grad_scales(self) -> dict[str, float]:
        """Paper's gradient rescaling: parameter name → ``H/h`` for attention slices of a layer
        with ``h`` key heads out of ``H`` (1.0 for MLP parameters)."""
        n_heads = self.model.n_heads
        per_layer = {layer: len(hs) for layer, hs in self.heads_by_layer().items()}
        return {
            s.name: (n_heads / per_layer[s.layer] if "mlp" not in s.roles and per_layer.get(s.layer) else 1.0)
            for s in self.slices
        }

    def by_name(self) -> dict[str, ParamSlice]:
        return {s.name: s for s in self.slices}

    def to_dataframe(self):
        import pandas as pd

        rows = [{"name": s.name, "layer": s.layer, "roles": ",".join(s.roles), "axis": "all" if s.whole else s.axis,
                 "ranges": s.ranges, "n_params": s.n_params} for s in self.slices]
        return pd.DataFrame(rows, columns=["name", "layer", "roles", "axis", "ranges", "n_params"])

    def check_model(self, model: torch.nn.Module) -> None:
        """Refuse an HF model whose architecture or shape, or parameter shapes, differ from the slices' model.

        Args:
            model: a plain HF model (its load name is unknown, so names are not compared).

        Returns:
            None; raises :class:`SliceError` naming both models and the fix.
        """
        check_model(
            self.model, ModelSpec.from_hf(model), "these slices",
            "map the key components onto this model with head_slices()", compare_name=False, error=SliceError,
            plural=True,
        )
        params = dict(model.named_parameters(remove_duplicate=False))
        for s in self.slices:
            if s.name not in params:
                raise SliceError(f"parameter {s.name!r} of the slices does not exist in {type(model).__name__}. Fix: use slices made for this architecture.")
            if tuple(params[s.name].shape) != s.shape:
                raise SliceError(f"parameter {s.name!r} has shape {tuple(params[s.name].shape)} but the slices expect {s.shape}.")


# ----------------------------------------------------------------------------- mapping


def _merge(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for a, b in sorted(set(ranges)):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def _block_offset(block: int, facts: dict[str, Any]) -> int:
    widths = (facts["n_heads"] * facts["d_head"], facts["n_kv_heads"] * facts["d_head"], facts["n_kv_heads"] * facts["d_head"])
    return sum(widths[:block])


def _kv_groups(heads: list[tuple[int, int]], facts: dict[str, Any], kv_policy: str) -> list[tuple[int, int]]:
    group_size = facts["n_heads"] // facts["n_kv_heads"]
    chosen = set(heads)
    groups = sorted({(l, h // group_size) for l, h in heads})
    if kv_policy == "frozen":
        return []
    if kv_policy == "exclusive":
        return [(l, g) for l, g in groups if all((l, g * group_size + i) in chosen for i in range(group_size))]
    return groups


def head_slices(
    model: torch.nn.Module,
    key: KeyComponents | Iterable[tuple[int, int]],
    kv_policy: str = "group",  # one of KV_POLICIES
    include_mlps: bool = True,
    mlps: Iterable[int] = (),
    model_name: str | None = None,
) -> SliceSet:
    """Map key heads (and MLPs) to the parameter slices of the HF model ``model``.

    ``key`` is a :class:`KeyComponents` (checked against the model with
    ``check_model``; give ``model_name`` to compare the name too, else only the
    shape is compared) or a plain list of ``(layer, head)`` with ``mlps``.
    ``kv_policy``: see the module docstring. ``include_mlps=False`` drops the
    selection's MLPs.
    """
    if kv_policy not in KV_POLICIES:
        raise SliceError(f"kv_policy={kv_policy!r} is unknown. Fix: use one of {KV_POLICIES} (see mathcircuits.finetune.slices).")
    layout = resolve_layout(model)
    facts = model_facts(model, model_name)
    if isinstance(key, KeyComponents):  # without model_name, an HF model does not know its name: compare shapes
        key.check_model(ModelSpec.from_hf(model, model_name), compare_name=model_name is not None)
        if model_name is None:
            facts["name"] = key.model.name  # the slices carry the name the selection was made under
        heads = [tuple(h) for h in key.heads]
        mlp_layers = list(key.mlps) + list(mlps)
    else:
        heads = [tuple(h) for h in key]
        mlp_layers = list(mlps)
    if not include_mlps:
        mlp_layers = []
    n_layers, n_heads = facts["n_layers"], facts["n_heads"]
    for item in heads:
        if len(item) != 2:
            raise SliceError(f"head {item!r} is not a (layer, head) pair. Fix: pass heads as [(layer, head), ...].")
        layer, head = int(item[0]), int(item[1])
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise SliceError(
                f"head ({layer}, {head}) is out of range for {facts['name']!r} ({n_layers} layers × {n_heads} heads). "
                f"Fix: use layers 0..{n_layers - 1} and heads 0..{n_heads - 1}."
            )
    for layer in mlp_layers:
        if not 0 <= layer < n_layers:
            raise SliceError(f"MLP {layer} is out of range for {facts['name']!r} ({n_layers} layers). Fix: use layers 0..{n_layers - 1}.")
    heads = sorted({(int(l), int(h)) for l, h in heads})
    mlp_layers = sorted(set(int(m) for m in mlp_layers))
    if not heads and not mlp_layers:
        raise SliceError("the selection has no heads and no MLPs, so nothing would be tuned. Fix: select key components first.")

    d = facts["d_head"]
    params = dict(model.named_parameters(remove_duplicate=False))
    modules = dict(model.named_modules())
    # (param name) -> {"ranges": [...], "roles": set, ...}
    pending: dict[str, dict[str, Any]] = {}

    def add(layer: int, proj: Projection, role: str, lo: int, hi: int) -> None:
        mod_name = f"{layout.layers}.{layer}.{proj.module}"
        if mod_name not in modules:
            raise SliceError(f"module {mod_name!r} is missing from {type(model).__name__}; the layout for {facts['model_type']!r} does not fit this model.")
        feature = "out" if role in ("q", "k", "v") else "in"
        off = _block_offset(proj.block, facts) if feature == "out" else 0
        for kind in ("weight", "bias"):
            pname = f"{mod_name}.{kind}"
            if pname not in params or params[pname] is None:
                continue
            if kind == "bias" and feature == "in":
                continue  # the output projection's bias is shared by all heads
            if kind == "weight":
                axis = (0 if proj.weight == "out_in" else 1) if feature == "out" else (1 if proj.weight == "out_in" else 0)
            else:
                axis = 0
            entry = pending.setdefault(pname, {"module": mod_name, "kind": kind, "axis": axis, "feature": feature,
                                               "weight_layout": proj.weight, "layer": layer, "ranges": [], "roles": set()})
            entry["ranges"].append((off + lo, off + hi))
            entry["roles"].add(role)

    for layer, head in heads:
        add(layer, layout.q, "q", head * d, (head + 1) * d)
        add(layer, layout.o, "o", head * d, (head + 1) * d)
    kv_groups = _kv_groups(heads, facts, kv_policy)
    for layer, g in kv_groups:
        add(layer, layout.k, "k", g * d, (g + 1) * d)
        add(layer, layout.v, "v", g * d, (g + 1) * d)

    out: list[ParamSlice] = []
    role_order = ("q", "k", "v", "o", "mlp")
    for pname, e in pending.items():
        out.append(ParamSlice(
            name=pname, module=e["module"], kind=e["kind"], shape=tuple(params[pname].shape), axis=e["axis"],
            ranges=_merge(e["ranges"]), feature=e["feature"], weight_layout=e["weight_layout"], layer=e["layer"],
            roles=tuple(r for r in role_order if r in e["roles"]),
        ))
    for layer in mlp_layers:
        prefix = f"{layout.layers}.{layer}.{layout.mlp}"
        if prefix not in modules:
            raise SliceError(f"MLP module {prefix!r} is missing from {type(model).__name__}; the layout for {facts['model_type']!r} does not fit this model.")
        for mod_name, mod in modules[prefix].named_modules(prefix=prefix):
            for kind, p in mod.named_parameters(recurse=False):
                if kind not in ("weight", "bias"):
                    raise SliceError(f"MLP parameter {mod_name}.{kind} is neither a weight nor a bias; this MLP type is not supported.")
                out.append(ParamSlice(
                    name=f"{mod_name}.{kind}", module=mod_name, kind=kind, shape=tuple(p.shape), axis=None, ranges=(),
                    feature="all", weight_layout=_orientation(mod), layer=layer, roles=("mlp",),
                ))
    order = {name: i for i, name in enumerate(params)}
    out.sort(key=lambda s: order[s.name])
    n_total = sum(p.numel() for p in model.parameters())
    return SliceSet(
        model=facts, heads=tuple(heads), mlps=tuple(mlp_layers), kv_policy=kv_policy, slices=tuple(out),
        n_model_params=n_total, kv_groups=tuple(kv_groups),
    )


def _orientation(module: torch.nn.Module) -> Literal["out_in", "in_out"]:
    """``"in_out"`` for GPT-2's Conv1D (weight [in, out]), else ``"out_in"`` (nn.Linear)."""
    if isinstance(module, torch.nn.Linear):
        return "out_in"
    from transformers.pytorch_utils import Conv1D

    if isinstance(module, Conv1D):
        return "in_out"
    raise SliceError(
        f"module {type(module).__name__} has parameters but is neither nn.Linear nor Conv1D; "
        "precise SFT can only tune linear layers. Fix: select another MLP or extend mathcircuits.finetune.adapter."
    )
