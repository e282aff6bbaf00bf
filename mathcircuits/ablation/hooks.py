"""What a knocked-out head outputs: the ablation choices and the hooks that replace a head's ``hook_z``.

:data:`Ablation` names the three replacements (``mean``, ``position_mean``, ``resample``; see
:mod:`mathcircuits.ablation.knockout`), :data:`Scope` the positions replaced (``all`` or ``last``).

Usage::

    run = ablated_model(model, [(1, 2), (2, 0)], head_means(model, pairs))
    logits = run(tokens)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Literal, TypeAlias, get_args

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.ablation.means import HeadMeans
from mathcircuits.models import HookedModel, PrefixRunner, hooks

__all__ = [
    "Ablation",
    "Scope",
    "ablated_model",
]

#: What a knocked-out head outputs (the ``ablation`` choices of the knockout, transfer and ``ValidationConfig``).
Ablation: TypeAlias = Literal["mean", "position_mean", "resample"]
ABLATIONS: tuple[str, ...] = get_args(Ablation)
#: Which positions a knockout replaces (the ``scope`` choices).
Scope: TypeAlias = Literal["all", "last"]
SCOPES: tuple[str, ...] = get_args(Scope)

Hook: TypeAlias = tuple[str, Any]


def check_choice(ablation: Ablation, scope: Scope) -> None:
    """Refuse (ValueError) an unknown ablation or scope, naming the choices (for callers without a type checker)."""
    if ablation not in ABLATIONS:
        raise FixableValueError(f"ablation {ablation!r} is unknown. ", f"use one of {list(ABLATIONS)}.")
    if scope not in SCOPES:
        raise FixableValueError(f"scope {scope!r} is unknown. ", "use 'all' or 'last'.")


def z_ablation_hooks(
    model: HookedModel,
    heads: Sequence[tuple[int, int]],
    values: Float[Tensor, "batch pos layer head d_head"],
    scope: Scope,
    layer_index: dict[int, int] | None = None,
) -> list[Hook]:
    """Hooks replacing ``hook_z`` of ``heads`` by ``values`` ``[batch|1, pos|1, layer, head, d_head]``.

    Size-1 batch or position axes broadcast. ``layer_index`` maps a model layer to its index in
    ``values``' layer axis (default: the same). ``hook_z`` is per query head on every family, so these
    touch exactly the ablated heads.
    """
    by_layer: dict[int, list[int]] = defaultdict(list)
    for l, h in heads:
        model.spec.check_head(l, h)
        by_layer[l].append(h)
    out = []
    for layer, hs in by_layer.items():
        dev = model.layer_device(layer)  # where block `layer` computes (a split model's blocks differ)
        idx = torch.tensor(hs, device=dev)
        value = values[:, :, (layer_index or {}).get(layer, layer)][:, :, hs].to(dev)  # the heads' rows only

        def hook(act: Tensor, hook: Any, idx: Tensor = idx, value: Tensor = value) -> Tensor:
            act = act.clone()
            idx, value = idx.to(act.device), value.to(act.device, act.dtype)  # no-ops where the block computes
            if scope == "last":
                act[:, -1, idx] = value[:, -1]
            else:
                act[:, :, idx] = value.expand(act.shape[0], act.shape[1], -1, -1)
            return act

        out.append((hooks.z(layer), hook))
    return out


def set_ablation_hooks(
    model: HookedModel,
    sets: Sequence[Sequence[tuple[int, int]]],
    values: Float[Tensor, "batch pos layer head d_head"],
    scope: Scope,
) -> list[Hook]:
    """Hooks knocking out a different head set in each block of rows: :func:`z_ablation_hooks` for many sets at once.

    The forward's batch is ``len(sets)`` blocks of equal size, set-major (row ``s · batch + i`` is pair ``i``
    under ``sets[s]``); ``values`` ``[batch|1, pos|1, layer, head, d_head]`` are shared by the blocks. A block's
    heads take ``values`` by a masked copy, so each row gets what the one-set hooks give it.
    """
    n = len(sets)
    mask = torch.zeros(n, model.spec.n_layers, model.spec.n_heads, dtype=torch.bool, device=values.device)
    for s, heads in enumerate(sets):
        for l, h in heads:
            model.spec.check_head(l, h)
            mask[s, l, h] = True
    out = []
    for layer in sorted({l for heads in sets for l, _ in heads}):
        dev = model.layer_device(layer)
        m = mask[:, layer].to(dev)[:, None, None, :, None]  # [set, 1, 1, head, 1]
        value = values[:, :, layer].to(dev)[None]  # [1, batch|1, pos|1, head, d_head]

        def hook(act: Tensor, hook: Any, m: Tensor = m, value: Tensor = value) -> Tensor:
            a = act.reshape(n, act.shape[0] // n, *act.shape[1:])  # [set, batch, pos, head, d_head]
            m, value = m.to(act.device), value.to(act.device, act.dtype)
            if scope == "last":
                a = a.clone()
                a[:, :, -1] = torch.where(m[:, :, 0], value[:, :, -1], a[:, :, -1])
            else:
                a = torch.where(m, value, a)
            return a.reshape(act.shape)

        out.append((hooks.z(layer), hook))
    return out


def mean_ablation_hooks(
    model: HookedModel, heads: Sequence[tuple[int, int]], means: HeadMeans, scope: Scope
) -> list[Hook]:
    """Hooks of the position-free mean ablation of ``heads`` (:func:`z_ablation_hooks` with the means)."""
    return z_ablation_hooks(model, heads, means.means[None, None], scope)


def ablated_model(
    model: HookedModel, heads: Sequence[tuple[int, int]], means: HeadMeans, scope: Scope = "all"
) -> PrefixRunner:
    """A callable tokens → logits with ``heads`` mean-ablated (position-free mean; for :func:`score_pairs`).

    The model's :meth:`~mathcircuits.models.HookedModel.prefix_cached` forward: the shared prefix runs once per
    batch, ablated like every other position (scope ``"all"``) or clean (scope ``"last"``).
    """
    check_choice("mean", scope)
    hooks_ = mean_ablation_hooks(model, heads, means, scope)
    return model.prefix_cached(fwd_hooks=hooks_, prefix_hooks=hooks_ if scope == "all" else None)
