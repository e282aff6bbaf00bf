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

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._io import SavedResult
from mathcircuits.models.spec import ModelSpec, as_spec, check_model, heads_by_layer

__all__ = ["RULES", "KeyComponents", "SelectionError", "select_key_components"]

RULES = ("zscore", "threshold", "topk")


class SelectionError(ValueError):
    """A key-component selection does not fit the model or the request."""


@dataclass(frozen=True)
class KeyComponents(SavedResult):
    """Key heads ``[(layer, head)]`` and key MLPs ``[layer]``, with their scores and provenance.

    ``model`` is the :class:`~mathcircuits.models.ModelSpec` of the model they were selected on
    (a dict from ``ModelSpec.to_dict()`` is accepted and converted). Saved as JSON by ``save("x.json")``.
    """

    STAGE = "identify"

    model: ModelSpec | dict[str, Any]
    heads: tuple[tuple[int, int], ...]
    mlps: tuple[int, ...] = ()
    head_scores: tuple[float, ...] = ()
    mlp_scores: tuple[float, ...] = ()
    rule: str = "zscore"
    rule_params: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)  # data and patching settings it came from

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", as_spec(self.model))
        object.__setattr__(self, "heads", tuple((int(layer), int(head)) for layer, head in self.heads))
        object.__setattr__(self, "mlps", tuple(int(layer) for layer in self.mlps))
        spec = self.model
        for layer, head in self.heads:
            if not (0 <= layer < spec.n_layers and 0 <= head < spec.n_heads):
                raise SelectionError(
                    f"head ({layer}, {head}) is out of range for {spec.describe()}. "
                    f"Fix: use layers 0..{spec.n_layers - 1} and heads 0..{spec.n_heads - 1}."
                )
        for layer in self.mlps:
            if not 0 <= layer < spec.n_layers:
                raise SelectionError(
                    f"MLP {layer} is out of range for {spec.describe()}. Fix: use layers 0..{spec.n_layers - 1}."
                )
        bad = [x for x in (*self.head_scores, *self.mlp_scores) if not math.isfinite(x)]
        if bad:
            raise SelectionError(f"scores {bad} are not finite. Fix: select from a result without NaN or infinity.")

    @property
    def head_fraction(self) -> float:
        return len(self.heads) / (self.model.n_layers * self.model.n_heads)

    def heads_by_layer(self) -> dict[int, list[int]]:
        """``{layer: [head, ...]}`` of the key heads."""
        return heads_by_layer(self.heads)

    def check_model(self, model: Any, compare_name: bool = True) -> None:
        """Refuse a model other than the one the selection was made on.

        Args:
            model: a hooked model, a ModelSpec, or a plain HF model.
            compare_name: compare the names too (a plain HF model does not know its load name).

        Returns:
            None; raises :class:`SelectionError` naming both models and the fix.
        """
        check_model(
            self.model,
            model,
            "this key-component selection",
            "select key components on this model (mathcircuits identify)",
            compare_name=compare_name,
            error=SelectionError,
        )

    def to_dataframe(self):

        nan_h, nan_m = [float("nan")] * len(self.heads), [float("nan")] * len(self.mlps)
        rows = [
            {"kind": "head", "layer": layer, "head": head, "score": s}
            for (layer, head), s in zip(self.heads, self.head_scores or nan_h)
        ]
        rows += [
            {"kind": "mlp", "layer": layer, "head": -1, "score": s}
            for layer, s in zip(self.mlps, self.mlp_scores or nan_m)
        ]
        return pd.DataFrame(rows, columns=["kind", "layer", "head", "score"])


def _pick(effects: Tensor, rule: str, threshold: float, k: int, z: float, max_k: int) -> list[int]:
    flat = effects.flatten().double()  # finite: PatchingResult.check_finite ran first
    order = torch.argsort(flat).tolist()
    if rule == "topk":
        return order[:k]
    if rule == "threshold":
        return [i for i in order if flat[i] < threshold]
    if rule == "zscore":
        mu, sd = flat.mean(), flat.std()
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

    Non-finite effects are refused, never dropped (dropping one could hide the
    strongest head): an infinity anywhere, or a NaN among otherwise finite head
    or MLP effects, raises :class:`SelectionError` naming the senders (see
    :meth:`PatchingResult.check_finite`). MLP effects that are all NaN mean the
    MLPs were not patched (``senders=("heads",)``): the selection then has no MLPs.

    Args:
        result: the patching result to select from.
        rule: ``"zscore"``, ``"threshold"`` or ``"topk"`` (see the module docstring).
        threshold: effect cut of the ``"threshold"`` rule.
        k: number of heads of the ``"topk"`` rule.
        z: number of standard deviations below the mean of the ``"zscore"`` rule.
        max_k: at most this many heads under ``"zscore"``.
        mlp_rule: rule for the MLPs (default ``"topk"``).
        mlp_k: number of MLPs under ``"topk"``.
        source: extra provenance to record.

    Returns:
        The :class:`KeyComponents`, carrying the result's model spec.
    """
    if rule not in RULES:
        raise SelectionError(f"rule {rule!r} is unknown. Fix: use one of {RULES}.")
    if (mlp_rule or "topk") not in RULES:
        raise SelectionError(f"mlp_rule {mlp_rule!r} is unknown. Fix: use one of {RULES}.")
    try:
        result.check_finite()
    except ValueError as err:
        raise SelectionError(str(err)) from None
    heads_eff: Float[Tensor, "layer head"] = result.head_effects
    n_heads = heads_eff.shape[1]
    idx = _pick(heads_eff, rule, threshold, k, z, max_k)
    heads = tuple((i // n_heads, i % n_heads) for i in idx)
    mlps: tuple[int, ...] = ()
    mlp_scores: tuple[float, ...] = ()
    if torch.isfinite(result.mlp_effects).all():
        midx = _pick(result.mlp_effects, mlp_rule or "topk", threshold, mlp_k, z, max_k)
        mlps = tuple(int(i) for i in midx)
        mlp_scores = tuple(float(result.mlp_effects[i]) for i in midx)
    params = {"threshold": threshold, "k": k, "z": z, "max_k": max_k, "mlp_rule": mlp_rule or "topk", "mlp_k": mlp_k}
    provenance = {
        "metric": result.metric,
        "method": result.method,
        "n_pairs": result.n_pairs,
        "operations": list(result.operations),
        **(source or {}),
    }
    return KeyComponents(
        model=result.model,
        heads=heads,
        mlps=mlps,
        head_scores=tuple(float(heads_eff.flatten()[i]) for i in idx),
        mlp_scores=mlp_scores,
        rule=rule,
        rule_params=params,
        source=provenance,
    )
