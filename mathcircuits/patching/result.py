"""The value path patching returns: per-head and per-MLP effects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._io import SavedResult
from mathcircuits.patching.metrics import METRICS

__all__ = ["PatchingResult", "METRICS"]


@dataclass(frozen=True)
class PatchingResult(SavedResult):
    """Effects of patching each sender (head or MLP) to the logits, averaged over pairs.

    ``head_effects[l, h]`` and ``mlp_effects[l]`` are the mean effect over pairs under
    ``metric``: ``relative_logit`` = (patched − clean) / clean of the correct answer's
    raw logit (Zhang et al. 2024, Eq. 2), ``logit_diff`` = patched − clean, or
    ``prob_change`` = patched − clean probability of the answer. NaN marks senders
    that were not patched. ``per_pair_heads`` [pair, layer, head] and
    ``per_pair_mlps`` [pair, layer] are kept when asked for.
    """

    head_effects: Float[Tensor, "layer head"]
    mlp_effects: Float[Tensor, " layer"]
    metric: str
    method: str
    model: dict[str, Any]
    n_pairs: int
    pair_ids: list[int] = field(default_factory=list)
    operations: list[str] = field(default_factory=list)
    clean_logit_mean: float = float("nan")
    per_pair_heads: Tensor | None = None
    per_pair_mlps: Tensor | None = None
    seconds: float = float("nan")
    settings: dict[str, Any] = field(default_factory=dict)


    def to_dataframe(self):
        """One row per sender: kind (head|mlp), layer, head (−1 for MLPs), effect, rank by effect (most negative first)."""
        import pandas as pd

        rows = []
        n_layers, n_heads = self.head_effects.shape
        for layer in range(n_layers):
            for head in range(n_heads):
                rows.append({"kind": "head", "layer": layer, "head": head, "component": f"L{layer}.H{head}", "effect": float(self.head_effects[layer, head])})
            rows.append({"kind": "mlp", "layer": layer, "head": -1, "component": f"MLP{layer}", "effect": float(self.mlp_effects[layer])})
        df = pd.DataFrame(rows)
        df["rank"] = df.groupby("kind")["effect"].rank(method="first").astype("Int64")
        return df

    def top_heads(self, k: int = 10) -> list[tuple[int, int, float]]:
        """The k heads with the most negative effect: (layer, head, effect)."""
        flat = self.head_effects.flatten().nan_to_num(nan=float("inf"))
        k = min(k, int(torch.isfinite(flat).sum()))
        idx = torch.argsort(flat)[:k]
        n_heads = self.head_effects.shape[1]
        return [(int(i) // n_heads, int(i) % n_heads, float(flat[i])) for i in idx]
