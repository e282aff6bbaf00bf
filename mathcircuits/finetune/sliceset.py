"""The values that say what precise SFT tunes: :class:`ParamSlice` (the tuned entries of one HF parameter) and
:class:`SliceSet` (all of them for one selection, with the model they were made for), saved as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pandas as pd
import torch
from jaxtyping import Bool, Int
from torch import Tensor

from mathcircuits._codec import Encoded
from mathcircuits._io import SavedResult, decode_fields, encode_fields
from mathcircuits.finetune.layouts import KVPolicy, SliceError
from mathcircuits.models.heads import Head
from mathcircuits.models.spec import ModelSpec, check_model, heads_by_layer

__all__ = ["ParamSlice", "SliceSet"]


@dataclass(frozen=True)
class ParamSlice:
    """The tuned entries of one HF parameter.

    ``ranges`` (half-open, sorted, disjoint) index weight axis ``axis`` (None: the whole parameter); ``feature`` says
    whether that axis is the module's output or input features.
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
            return torch.zeros(0, dtype=torch.long, device="cpu")
        return torch.cat([torch.arange(a, b, dtype=torch.long, device="cpu") for a, b in self.ranges])

    def mask(self) -> Bool[Tensor, "..."]:
        """Boolean mask of the parameter's shape, True on tuned entries."""
        m = torch.zeros(self.shape, dtype=torch.bool, device="cpu")
        if self.axis is None:
            m[...] = True
        else:
            m.index_fill_(self.axis, self.indices(), True)
        return m

    def to_dict(self) -> Encoded:
        """The slice as a plain dict of its fields (saved inside a :class:`SliceSet`)."""
        return encode_fields(self)

    @classmethod
    def from_dict(cls, d: Encoded) -> "ParamSlice":
        """Rebuild from :meth:`to_dict`; an unknown, missing or mistyped field is an error naming it."""
        return decode_fields(cls, d, "a parameter slice")


@dataclass(frozen=True, repr=False)
class SliceSet(SavedResult):
    """Every parameter slice that precise SFT tunes for a selection, with counts.

    ``n_tuned`` counts tuned scalars, ``n_model_params`` all parameters (tied weights once); ``model`` is the HF model
    the slices were made for.
    """

    STAGE = "finetune"
    DERIVED = ("n_tuned",)

    model: ModelSpec
    heads: tuple[Head, ...]
    mlps: tuple[int, ...]
    kv_policy: KVPolicy
    slices: tuple[ParamSlice, ...]
    n_model_params: int
    kv_groups: tuple[tuple[int, int], ...] = field(default=())  # (layer, group) whose K/V are tuned

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
        """Paper's gradient rescaling: parameter → ``H/h`` for a layer with ``h`` of ``H`` heads tuned (MLPs: 1.0)."""
        n_heads = self.model.n_heads
        per_layer = {layer: len(hs) for layer, hs in self.heads_by_layer().items()}
        return {
            s.name: (n_heads / per_layer[s.layer] if "mlp" not in s.roles and per_layer.get(s.layer) else 1.0)
            for s in self.slices
        }

    def by_name(self) -> dict[str, ParamSlice]:
        return {s.name: s for s in self.slices}

    def to_dataframe(self):

        rows = [
            {
                "name": s.name,
                "layer": s.layer,
                "roles": ",".join(s.roles),
                "axis": "all" if s.whole else s.axis,
                "ranges": s.ranges,
                "n_params": s.n_params,
            }
            for s in self.slices
        ]
        return pd.DataFrame(rows, columns=["name", "layer", "roles", "axis", "ranges", "n_params"])

    def check_model(self, model: torch.nn.Module) -> None:
        """Refuse an HF model whose architecture or shape, or parameter shapes, differ from the slices' model.

        Names are not compared (a loaded model's load name is unknown); raises :class:`SliceError` with the fix.
        """
        check_model(
            self.model,
            ModelSpec.from_hf(model),
            "these slices",
            "map the key components onto this model with head_slices()",
            compare_name=False,
            error=SliceError,
            plural=True,
        )
        params = dict(model.named_parameters(remove_duplicate=False))
        for s in self.slices:
            if s.name not in params:
                raise SliceError(
                    f"parameter {s.name!r} of the slices does not exist in {type(model).__name__}. ",
                    "use slices made for this architecture.",
                )
            if tuple(params[s.name].shape) != s.shape:
                raise SliceError(
                    f"parameter {s.name!r} has shape {tuple(params[s.name].shape)} but the slices expect {s.shape}."
                )

    def summary_items(self) -> list[tuple[str, str]]:
        """Model, heads, MLPs, K/V policy and tuned parameters."""
        return [
            ("model", self.model.name),
            ("heads", str(len(self.heads))),
            ("MLPs", str(len(self.mlps))),
            ("kv_policy", self.kv_policy),
            ("tuned", f"{self.n_tuned:,} ({self.fraction:.2%})"),
        ]
