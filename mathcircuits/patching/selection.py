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

Stability (:func:`selection_stability`). The effects are means over prompt pairs, so
which heads cross the rule's cut depends on which pairs were drawn. We resample the pairs
with replacement (``n_boot`` times, the per-pair effects the identify stage keeps), recompute
the mean effects and re-apply the same rule with the same parameters. A key head's
*stability* is the share of resamples that select it again (1.0: every resample; 0.5: a coin
flip). Heads outside the selection that resamples pick often are listed too, and the
spread of the selection's size and depth gives the intervals of claim C1 (see ``docs/claims.md``).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._io import SavedResult
from mathcircuits.models.spec import ModelSpec, as_spec, check_model, heads_by_layer
from mathcircuits.stats import bootstrap_indices

__all__ = ["RULES", "KeyComponents", "SelectionError", "median_depth", "select_key_components", "selection_stability"]

RULES = ("zscore", "threshold", "topk")


class SelectionError(ValueError):
    """A key-component selection does not fit the model or the request."""


@dataclass(frozen=True)
class KeyComponents(SavedResult):
    """Key heads ``[(layer, head)]`` and key MLPs ``[layer]``, with their scores and provenance.

    ``model`` is the :class:`~mathcircuits.models.ModelSpec` of the model they were selected on
    (a dict from ``ModelSpec.to_dict()`` is accepted and converted). Saved as JSON by ``save("x.json")``.

    Stability (filled by :func:`selection_stability`; empty when not measured): ``stability[i]`` is
    the share of ``stability_n_boot`` bootstrap resamples of the pairs (seed ``stability_seed``) that
    select ``heads[i]`` again; ``stability_others`` maps other heads ("L3.H1") selected by at least
    10% of the resamples to their share; ``stability_sizes`` and ``stability_depths`` are, per
    resample, the number of heads selected and the median relative depth of their layers
    (layer / (n_layers − 1); NaN when a resample selects none).
    """

    STAGE = "identify"
    VERSION = 3

    model: ModelSpec | dict[str, Any]
    heads: tuple[tuple[int, int], ...]
    mlps: tuple[int, ...] = ()
    head_scores: tuple[float, ...] = ()
    mlp_scores: tuple[float, ...] = ()
    rule: str = "zscore"
    rule_params: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)  # data and patching settings it came from
    stability: tuple[float, ...] = ()
    stability_others: dict[str, float] = field(default_factory=dict)
    stability_sizes: tuple[int, ...] = ()
    stability_depths: tuple[float, ...] = ()
    stability_n_boot: int = 0
    stability_seed: int = 0

    @classmethod
    def upgrade(cls, version: int, fields: dict[str, Any]) -> dict[str, Any]:
        """Versions 1–2 had no stability: they load with none (re-run identify to measure it)."""
        none = {"stability": (), "stability_others": {}, "stability_sizes": (), "stability_depths": ()}
        return {**none, "stability_n_boot": 0, "stability_seed": 0, **fields}

    @property
    def has_stability(self) -> bool:
        """Whether :func:`selection_stability` filled the stability fields."""
        return self.stability_n_boot > 0

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
        """One row per key component: kind, layer, head (−1 for MLPs), score, and for heads the share of
        bootstrap resamples that select it again (``stability``; NaN when not measured and for MLPs)."""

        nan = float("nan")
        nan_h, nan_m = [nan] * len(self.heads), [nan] * len(self.mlps)
        stab = self.stability or nan_h
        rows = [
            {"kind": "head", "layer": layer, "head": head, "score": s, "stability": st}
            for (layer, head), s, st in zip(self.heads, self.head_scores or nan_h, stab)
        ]
        rows += [
            {"kind": "mlp", "layer": layer, "head": -1, "score": s, "stability": nan}
            for layer, s in zip(self.mlps, self.mlp_scores or nan_m)
        ]
        return pd.DataFrame(rows, columns=["kind", "layer", "head", "score", "stability"])


def median_depth(layers: Sequence[int], n_layers: int) -> float:
    """Median of ``layers`` as a share of the depth, ``layer / (n_layers − 1)``; NaN for no layer.

    Args:
        layers: layer indices (e.g. of the key heads).
        n_layers: the model's number of layers.

    Returns:
        A float in [0, 1], or NaN.
    """
    return statistics.median(layers) / max(1, n_layers - 1) if len(layers) else float("nan")


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


def selection_stability(
    result: Any, key: KeyComponents, n_boot: int = 200, seed: int = 0, min_share: float = 0.1
) -> KeyComponents:
    """How often each key head is selected again when the pairs are resampled (see the module docstring).

    Args:
        result: the :class:`~mathcircuits.patching.PatchingResult` the selection was made from, with its
            per-pair head effects (``keep_per_pair=True``).
        key: the selection, made by :func:`select_key_components` from ``result``; its rule and parameters
            are re-applied to every resample.
        n_boot: number of bootstrap resamples of the pairs.
        seed: bootstrap seed (recorded in the result).
        min_share: heads outside the selection are listed in ``stability_others`` when at least this share
            of resamples selects them.

    Returns:
        ``key`` with the stability fields filled.
    """
    per_pair = result.per_pair_heads
    if per_pair is None or per_pair.shape[0] == 0:
        raise SelectionError(
            "the patching result has no per-pair head effects, so the pairs cannot be resampled. "
            "Fix: path-patch with keep_per_pair=True (the identify stage does)."
        )
    p = key.rule_params
    n_layers, n_heads = per_pair.shape[1], per_pair.shape[2]
    counts = torch.zeros(n_layers * n_heads)
    sizes: list[int] = []
    depths: list[float] = []
    for idx in bootstrap_indices(per_pair.shape[0], n_boot, seed):
        eff = per_pair[idx].double().nanmean(0)
        picked = _pick(
            eff.nan_to_num(nan=0.0),
            key.rule,
            float(p.get("threshold", -0.05)),
            int(p.get("k", 10)),
            float(p.get("z", 3.0)),
            int(p.get("max_k", 32)),
        )
        counts[picked] += 1
        sizes.append(len(picked))
        depths.append(median_depth([i // n_heads for i in picked], n_layers))
    share = counts / n_boot
    chosen = {layer * n_heads + head for layer, head in key.heads}
    others = {
        f"L{i // n_heads}.H{i % n_heads}": round(float(share[i]), 4)
        for i in torch.argsort(share, descending=True).tolist()
        if i not in chosen and float(share[i]) >= min_share
    }
    return dataclasses.replace(
        key,
        stability=tuple(round(float(share[layer * n_heads + head]), 4) for layer, head in key.heads),
        stability_others=others,
        stability_sizes=tuple(sizes),
        stability_depths=tuple(depths),
        stability_n_boot=n_boot,
        stability_seed=seed,
    )
