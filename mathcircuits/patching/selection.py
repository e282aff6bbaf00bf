"""Key components: which heads and MLPs matter, as a small JSON value.

The paper's rule (Zhang et al. 2024, §3.2) calls a head *key* when patching it
lowers the correct-answer logit by more than 5% (effect < −0.05). On small
models effects are smaller (on SmolLM2-135M the strongest head is near −4%),
so a fixed threshold can select nothing. We therefore offer:

* ``"threshold"``: effect < ``threshold`` (the paper's rule with −0.05);
* ``"topk"``: the k most negative effects;
* ``"zscore"`` (default): effect below ``mean − z·std`` of all heads' effects,
  i.e. a threshold relative to the distribution, which adapts to the model's
  scale and still picks a small tail (at z = 3, about 1% of a Gaussian), and at
  most ``max_k`` of them.

The selection records the model identity and shape, so loading it for another
model fails clearly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from mathcircuits._io import read_json, write_json

__all__ = ["KeyComponents", "SelectionError", "select_key_components", "RULES"]

RULES = ("zscore", "threshold", "topk")


class SelectionError(ValueError):
    """A key-component selection does not fit the model or the request."""


@dataclass(frozen=True)
class KeyComponents:
    """Key heads ``[(layer, head)]`` and key MLPs ``[layer]``, with their scores and provenance."""

    model: dict[str, Any]  # ModelSpec.to_dict(): name, architecture, n_layers, n_heads, n_kv_heads, d_head, ...
    heads: tuple[tuple[int, int], ...]
    mlps: tuple[int, ...] = ()
    head_scores: tuple[float, ...] = ()
    mlp_scores: tuple[float, ...] = ()
    rule: str = "zscore"
    rule_params: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)  # data and patching settings it came from

    def __post_init__(self) -> None:
        n_layers, n_heads = self.model["n_layers"], self.model["n_heads"]
        for layer, head in self.heads:
            if not (0 <= layer < n_layers and 0 <= head < n_heads):
                raise SelectionError(f"head ({layer}, {head}) is out of range for {self.model['name']} ({n_layers} layers × {n_heads} heads).")
        for layer in self.mlps:
            if not 0 <= layer < n_layers:
                raise SelectionError(f"MLP {layer} is out of range for {self.model['name']} ({n_layers} layers).")

    @property
    def head_fraction(self) -> float:
        return len(self.heads) / (self.model["n_layers"] * self.model["n_heads"])

    def heads_by_layer(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for layer, head in self.heads:
            out.setdefault(layer, []).append(head)
        return out

    def check_model(self, spec: Any) -> None:
        """Refuse a selection made on another model (name or shape differs)."""
        mine = {k: self.model.get(k) for k in ("name", "n_layers", "n_heads", "n_kv_heads", "d_head", "d_model")}
        theirs = {k: getattr(spec, k, None) if not isinstance(spec, dict) else spec.get(k) for k in mine}
        if mine != theirs:
            diff = {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}
            raise SelectionError(
                f"this key-component selection was made on {mine['name']!r} and does not fit the model {theirs['name']!r} "
                f"(selection vs model: {diff}). Fix: select key components on this model (mathcircuits identify)."
            )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["heads"] = [list(h) for h in self.heads]
        d["mlps"] = list(self.mlps)
        d["head_scores"] = list(self.head_scores)
        d["mlp_scores"] = list(self.mlp_scores)
        return {"kind": "mathcircuits.KeyComponents", "version": 1, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "KeyComponents":
        if d.get("kind") != "mathcircuits.KeyComponents":
            raise SelectionError("this JSON is not a mathcircuits key-component selection (missing kind). Fix: pass a file written by KeyComponents.save().")
        return cls(
            model=d["model"], heads=tuple((int(l), int(h)) for l, h in d["heads"]), mlps=tuple(int(m) for m in d.get("mlps", [])),
            head_scores=tuple(float(x) for x in d.get("head_scores", [])), mlp_scores=tuple(float(x) for x in d.get("mlp_scores", [])),
            rule=d.get("rule", "zscore"), rule_params=d.get("rule_params", {}), source=d.get("source", {}),
        )

    def save(self, path: str | Path) -> Path:
        return write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "KeyComponents":
        return cls.from_dict(read_json(path))

    def to_dataframe(self):
        import pandas as pd

        rows = [{"kind": "head", "layer": l, "head": h, "score": s} for (l, h), s in zip(self.heads, self.head_scores or [float("nan")] * len(self.heads))]
        rows += [{"kind": "mlp", "layer": l, "head": -1, "score": s} for l, s in zip(self.mlps, self.mlp_scores or [float("nan")] * len(self.mlps))]
        return pd.DataFrame(rows, columns=["kind", "layer", "head", "score"])


def _pick(effects: torch.Tensor, rule: str, threshold: float, k: int, z: float, max_k: int) -> list[int]:
    flat = effects.flatten().double()
    finite = torch.isfinite(flat)
    vals = torch.where(finite, flat, torch.full_like(flat, float("inf")))
    order = torch.argsort(vals).tolist()
    order = [i for i in order if finite[i]]
    if rule == "topk":
        return order[:k]
    if rule == "threshold":
        return [i for i in order if flat[i] < threshold]
    if rule == "zscore":
        mu, sd = flat[finite].mean(), flat[finite].std()
        cut = float(mu - z * sd)
        return [i for i in order if flat[i] < cut and flat[i] < 0][:max_k]
    raise SelectionError(f"rule {rule!r} is unknown. Fix: use one of {RULES}.")


def select_key_components(
    result: Any,
    rule: str = "zscore",
    threshold: float = -0.05,
    k: int = 10,
    z: float = 3.0,
    max_k: int = 32,
    mlp_rule: str | None = None,
    mlp_k: int = 2,
    source: dict[str, Any] | None = None,
) -> KeyComponents:
    """Select key heads (and MLPs) from a :class:`~mathcircuits.patching.PatchingResult`.

    Effects are "more negative = more important" (patching the sender to the
    counterfactual lowers the correct answer's logit). ``mlp_rule`` defaults to
    ``"topk"`` with ``mlp_k`` MLPs, since there are few MLPs per model.
    """
    if rule not in RULES:
        raise SelectionError(f"rule {rule!r} is unknown. Fix: use one of {RULES}.")
    heads_eff = result.head_effects
    n_heads = heads_eff.shape[1]
    idx = _pick(heads_eff, rule, threshold, k, z, max_k)
    heads = tuple((i // n_heads, i % n_heads) for i in idx)
    mlps: tuple[int, ...] = ()
    mlp_scores: tuple[float, ...] = ()
    if torch.isfinite(result.mlp_effects).any():
        midx = _pick(result.mlp_effects, mlp_rule or "topk", threshold, mlp_k, z, max_k)
        mlps = tuple(int(i) for i in midx)
        mlp_scores = tuple(float(result.mlp_effects[i]) for i in midx)
    return KeyComponents(
        model=dict(result.model), heads=heads, mlps=mlps,
        head_scores=tuple(float(heads_eff.flatten()[i]) for i in idx), mlp_scores=mlp_scores,
        rule=rule, rule_params={"threshold": threshold, "k": k, "z": z, "max_k": max_k, "mlp_rule": mlp_rule or "topk", "mlp_k": mlp_k},
        source={"metric": result.metric, "method": result.method, "n_pairs": result.n_pairs, "operations": list(result.operations), **(source or {})},
    )
