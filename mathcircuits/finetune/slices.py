"""From key heads and MLPs to the exact parameter slices of an HF model.

A key component is a unit of the *computation* (a query head, an MLP); an optimizer moves *parameters*. A key
head ``h`` of layer ``l`` tunes its query features and its output projection's input features; its KV group ``g``
tunes key and value features (where each family keeps them: :mod:`mathcircuits.finetune.layouts`). Under
grouped-query attention k and v are **shared** by every head of ``g``, so tuning them changes non-key heads too.
``kv_policy`` says what to do:

* ``"group"`` (default): tune the group's K/V when any of its heads is key (closest to the paper, which tuned q,
  k, v and o of each key head on multi-head models, where every group has one head);
* ``"exclusive"``: only when *all* its heads are key, so no non-key head changes (``"group"`` without GQA);
* ``"frozen"``: never tune K/V (query rows and output columns only).

A key MLP tunes every parameter of ``layers[l].mlp``. ``roles`` restricts which of q, k, v, o are tuned; families
whose q or k slices are not head-local (OLMo 2/3) are refused unless ``roles`` leaves those out, e.g.
``roles=("v", "o")``.

Example::

    slices = head_slices(model, KeyComponents.load("key_components.json"), model_name="SmolLM2-135M-Instruct")
    slices.n_tuned, slices.fraction, slices.to_dataframe()
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import torch

from mathcircuits._checks import own_checks
from mathcircuits.finetune.layouts import (
    HEAD_ROLES,
    KV_POLICIES,
    AttentionLayout,
    KVPolicy,
    Projection,
    SliceError,
    kv_groups,
    merge_ranges,
    model_facts,
    module_orientation,
    resolve_layout,
)
from mathcircuits.finetune.sliceset import ParamSlice, SliceSet
from mathcircuits.models.heads import Head
from mathcircuits.models.spec import ModelSpec
from mathcircuits.patching import KeyComponents

__all__ = ["head_slices"]


def _check_selection(heads: list, mlp_layers: list, facts: ModelSpec) -> None:
    n_layers, n_heads = facts.n_layers, facts.n_heads
    for item in heads:
        if len(item) != 2:
            raise SliceError(f"head {item!r} is not a (layer, head) pair. ", "pass heads as [(layer, head), ...].")
        layer, head = int(item[0]), int(item[1])
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise SliceError(
                f"head ({layer}, {head}) is out of range for {facts.name!r} ({n_layers} layers × {n_heads} heads). ",
                f"use layers 0..{n_layers - 1} and heads 0..{n_heads - 1}.",
            )
    for layer in mlp_layers:
        if not 0 <= layer < n_layers:
            raise SliceError(
                f"MLP {layer} is out of range for {facts.name!r} ({n_layers} layers). ",
                f"use layers 0..{n_layers - 1}.",
            )
    if not heads and not mlp_layers:
        raise SliceError(
            "the selection has no heads and no MLPs, so nothing would be tuned. ", "select key components first."
        )


class _Pending:
    """Collects feature ranges per parameter while heads are mapped."""

    def __init__(self, model: torch.nn.Module, layout: AttentionLayout, facts: ModelSpec) -> None:
        self.model, self.layout, self.facts = model, layout, facts
        self.params = dict(model.named_parameters(remove_duplicate=False))
        self.modules = dict(model.named_modules())
        self.entries: dict[str, dict[str, Any]] = {}

    def add(self, layer: int, role: str, unit: int) -> None:
        proj: Projection = self.layout.projection(role)  # type: ignore[arg-type]
        mod_name = f"{self.layout.layers}.{layer}.{proj.module}"
        if mod_name not in self.modules:
            raise SliceError(
                f"module {mod_name!r} is missing from {type(self.model).__name__}; the layout for "
                f"{self.facts.model_type!r} does not fit this model. ",
                "correct its row in finetune/layouts.py.",
            )
        feature = "in" if role == "o" else "out"
        lo, hi = proj.feature_range(unit, self.facts)
        for kind in ("weight", "bias"):
            pname = f"{mod_name}.{kind}"
            if self.params.get(pname) is None or (kind == "bias" and feature == "in"):
                continue  # no such parameter, or the output projection's bias (shared by all heads)
            out_axis = 0 if proj.weight == "out_in" else 1
            axis = 0 if kind == "bias" else (out_axis if feature == "out" else 1 - out_axis)
            entry = self.entries.setdefault(
                pname,
                {
                    "module": mod_name,
                    "kind": kind,
                    "axis": axis,
                    "feature": feature,
                    "weight_layout": proj.weight,
                    "layer": layer,
                    "ranges": [],
                    "roles": set(),
                },
            )
            entry["ranges"].append((lo, hi))
            entry["roles"].add(role)

    def slices(self) -> list[ParamSlice]:
        return [
            ParamSlice(
                name=pname,
                module=e["module"],
                kind=e["kind"],
                shape=tuple(self.params[pname].shape),
                axis=e["axis"],
                ranges=merge_ranges(e["ranges"]),
                feature=e["feature"],
                weight_layout=e["weight_layout"],
                layer=e["layer"],
                roles=tuple(r for r in HEAD_ROLES if r in e["roles"]),
            )
            for pname, e in self.entries.items()
        ]

    def mlp_slices(self, layer: int) -> list[ParamSlice]:
        prefix = f"{self.layout.layers}.{layer}.{self.layout.mlp}"
        if prefix not in self.modules:
            raise SliceError(
                f"MLP module {prefix!r} is missing from {type(self.model).__name__}; the layout for "
                f"{self.facts.model_type!r} does not fit this model. ",
                "correct its row in finetune/layouts.py.",
            )
        out = []
        for mod_name, mod in self.modules[prefix].named_modules(prefix=prefix):
            for kind, p in mod.named_parameters(recurse=False):
                if kind not in ("weight", "bias"):
                    raise SliceError(
                        f"MLP parameter {mod_name}.{kind} is neither a weight nor a bias; this MLP type is not "
                        "supported. ",
                        "select attention heads only (include_mlps=False).",
                    )
                out.append(
                    ParamSlice(
                        name=f"{mod_name}.{kind}",
                        module=mod_name,
                        kind=kind,
                        shape=tuple(p.shape),
                        axis=None,
                        ranges=(),
                        feature="all",
                        weight_layout=module_orientation(mod),
                        layer=layer,
                        roles=("mlp",),
                    )
                )
        return out


def head_slices(
    model: torch.nn.Module,
    key: KeyComponents | Iterable[tuple[int, int]],
    kv_policy: KVPolicy = "group",
    include_mlps: bool = True,
    mlps: Iterable[int] = (),
    model_name: str | None = None,
    roles: Iterable[str] = HEAD_ROLES,
) -> SliceSet:
    """Map key heads (and MLPs) to the parameter slices of the HF model ``model``.

    ``key`` (a :class:`KeyComponents` or a list of ``(layer, head)``) is checked against the model's shape, and its
    name when ``model_name`` is given. ``include_mlps=False`` drops the selection's MLPs; ``mlps`` adds MLP layers to
    tune whole. Slices come in the model's parameter order.
    """
    if kv_policy not in KV_POLICIES:
        raise SliceError(
            f"kv_policy={kv_policy!r} is unknown. ", f"use one of {KV_POLICIES} (see mathcircuits.finetune.slices)."
        )
    layout = resolve_layout(model)
    spec = ModelSpec.from_hf(model, model_name)
    if isinstance(key, KeyComponents):  # without model_name an HF model does not know its name: compare shapes
        key.check_model(spec, compare_name=model_name is not None)
        if model_name is None:  # it fits: the slices carry the name the selection was made under
            spec = dataclasses.replace(spec, name=key.model.name)
    facts = model_facts(model, spec.name)
    if isinstance(key, KeyComponents):
        heads, mlp_layers = [tuple(h) for h in key.heads], list(key.mlps) + list(mlps)
    else:
        heads, mlp_layers = [tuple(h) for h in key], list(mlps)
    mlp_layers = mlp_layers if include_mlps else []
    _check_selection(heads, mlp_layers, facts)
    heads = sorted({Head.of(h) for h in heads})
    mlp_layers = sorted({int(m) for m in mlp_layers})
    roles = layout.check_roles(roles, facts.model_type) if heads else HEAD_ROLES

    pending = _Pending(model, layout, facts)
    for layer, head in heads:
        for role in ("q", "o"):
            if role in roles:
                pending.add(layer, role, head)
    groups = kv_groups(heads, facts, kv_policy) if {"k", "v"} & set(roles) else []
    for layer, g in groups:
        for role in ("k", "v"):
            if role in roles:
                pending.add(layer, role, g)
    out = pending.slices()
    for layer in mlp_layers:
        out += pending.mlp_slices(layer)
    order = {name: i for i, name in enumerate(pending.params)}
    out.sort(key=lambda s: order[s.name])
    n_total = sum(p.numel() for p in model.parameters())
    return SliceSet(
        model=spec,
        heads=tuple(heads),
        mlps=tuple(mlp_layers),
        kv_policy=kv_policy,
        slices=tuple(out),
        n_model_params=n_total,
        kv_groups=tuple(groups),
    )


own_checks(head_slices, "kv_policy")  # a SliceError, as every refusal of a slice policy is
