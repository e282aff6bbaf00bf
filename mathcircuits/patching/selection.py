"""Selecting key components: which heads and MLPs matter, by a rule, and how stable that choice is.

The paper's rule (Zhang et al. 2024, §3.2): a head is *key* when patching it lowers the correct-answer
logit by more than 5% (effect < −0.05). Small models' effects are smaller (SmolLM2-135M's strongest
head: about −4%), so a fixed threshold can select nothing. The rules:

* ``"threshold"``: effect < ``threshold``; with ``threshold_of="share"`` (default) the effect is first
  divided by the total effect, so −0.05 means "5% of what the counterfactual does" in any metric;
* ``"topk"``: the k most negative effects;
* ``"zscore"`` (default): effect below ``mean − z·std`` over heads, at most ``max_k``: adapts to the
  model's scale and still picks a small tail (z = 3: about 1% of a Gaussian).

Stability (:func:`selection_stability`): the pairs are resampled (whole templates within operations when
known), the means recomputed and the rule re-applied; a head's *stability* is the share of resamples that
select it again. The spread of size and depth gives claim C1's intervals (``docs/claims.md``).
"""

from __future__ import annotations

import dataclasses

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._schema import expect
from mathcircuits.data import GenerationConfig
from mathcircuits.models.heads import Head
from mathcircuits.patching.config import Rule, SelectionConfig
from mathcircuits.patching.key_components import (
    RULES,
    KeyComponents,
    SelectionError,
    SelectionSource,
    median_depth,
)
from mathcircuits.patching.result import PatchingResult
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.bootstrap import bootstrap_indices, cluster_bootstrap_indices

__all__ = ["select_key_components", "selection_stability"]

_STABILITY_BOOT = Uncertainty(n_boot=200)  # a share of resamples needs no finer steps


def _pick(effects: Tensor, sel: SelectionConfig, total: float | None = None) -> list[int]:
    flat = effects.flatten().double()  # finite: PatchingResult.check_finite ran first
    order = torch.argsort(flat).tolist()
    if sel.rule == "topk":
        return order[: sel.k]
    if sel.rule == "threshold":
        scale = 1.0 if total is None else 1.0 / abs(total)
        return [i for i in order if flat[i] * scale < sel.threshold]
    if sel.rule == "zscore":
        mu, sd = flat.mean(), flat.std()
        cut = float(mu - sel.z * sd)
        return [i for i in order if flat[i] < cut and flat[i] < 0][: sel.max_k]
    raise SelectionError(f"rule {sel.rule!r} is unknown. ", f"use one of {RULES}.")


def select_key_components(
    result: PatchingResult,
    selection: SelectionConfig | None = None,
    *,
    rule: Rule | None = None,
    threshold: float | None = None,
    k: int | None = None,
    z: float | None = None,
    max_k: int | None = None,
    mlp_k: int | None = None,
    data: GenerationConfig | None = None,
    fallback: str | None = None,
) -> KeyComponents:
    """Select key heads (and MLPs) from a :class:`~mathcircuits.patching.PatchingResult`.

    Effects are "more negative = more important". The heads follow the selection's rule; the MLPs are
    the ``mlp_k`` strongest (there are few MLPs). Keyword arguments replace the selection's settings;
    ``data`` and ``fallback`` are recorded in the source.

    Non-finite effects are refused, never dropped (dropping one could hide the strongest head): an
    infinity anywhere, or a NaN among otherwise finite effects, raises :class:`SelectionError`
    (:meth:`PatchingResult.check_finite`). All-NaN MLP effects mean the MLPs were not patched: no MLPs.
    """
    expect(
        "select_key_components", "result", result, PatchingResult, "a PatchingResult",
        "pass path_patch(model, pairs)'s result (or PatchingResult.load(path))",
    )  # fmt: skip
    given = {"rule": rule, "threshold": threshold, "k": k, "z": z, "max_k": max_k, "mlp_k": mlp_k}
    changes = {name: value for name, value in given.items() if value is not None}
    if changes.get("rule", "topk") not in RULES:
        raise SelectionError(f"rule {changes['rule']!r} is unknown. ", f"use one of {RULES}.")
    sel = dataclasses.replace(selection or SelectionConfig(), **changes)
    try:
        result.check_finite()
    except ValueError as err:
        raise SelectionError(str(err)) from None
    heads_eff: Float[Tensor, "layer head"] = result.head_effects
    n_heads = heads_eff.shape[1]
    idx = _pick(heads_eff, sel, _total(result, sel))
    heads = tuple(Head(i // n_heads, i % n_heads) for i in idx)
    mlps: tuple[int, ...] = ()
    mlp_scores: tuple[float, ...] = ()
    if torch.isfinite(result.mlp_effects).all():
        midx = _pick(result.mlp_effects, SelectionConfig(rule="topk", k=max(sel.mlp_k, 1)))[: sel.mlp_k]
        mlps = tuple(int(i) for i in midx)
        mlp_scores = tuple(float(result.mlp_effects[i]) for i in midx)
    source = SelectionSource(
        metric=result.metric,
        method=result.method,
        n_pairs=result.n_pairs,
        operations=tuple(result.operations),
        data=data,
        fallback=fallback,
        pair_keys=tuple(result.pair_keys),
    )
    return KeyComponents(
        model=result.model,
        heads=heads,
        mlps=mlps,
        head_scores=tuple(float(heads_eff.flatten()[i]) for i in idx),
        mlp_scores=mlp_scores,
        selection=sel,
        source=source,
    )


def _total(result: PatchingResult, sel: SelectionConfig) -> float | None:
    """The total effect the threshold rule divides by (None: the rule compares raw effects)."""
    if sel.rule != "threshold" or sel.threshold_of != "share":
        return None
    total = result.total_interval().value
    if not total == total or abs(total) < 1e-12:
        raise SelectionError(
            f"the threshold rule with threshold_of='share' needs the total effect, but this result's is {total}. ",
            "re-run path patching (it records the total effect), or set selection.threshold_of: effect.",
        )
    return total


def selection_stability(
    result: PatchingResult,
    key: KeyComponents,
    uncertainty: Uncertainty = _STABILITY_BOOT,
    min_share: float = 0.1,
) -> KeyComponents:
    """How often each key head is selected again when the pairs are resampled (see the module docstring).

    ``result`` needs per-pair head effects (``keep_per_pair=True``); ``key`` must come from it, and its
    rule is re-applied to each resample. Heads outside the selection that at least ``min_share`` of
    resamples select go to ``stability_others``. Returns ``key`` with the stability fields filled.
    """
    per_pair = result.per_pair_heads
    if per_pair is None or per_pair.shape[0] == 0:
        raise SelectionError(
            "the patching result has no per-pair head effects, so the pairs cannot be resampled. ",
            "path-patch with keep_per_pair=True (the identify stage does).",
        )
    if key.selection is None:
        raise SelectionError(
            "these key components were not chosen by a rule (key.selection is None), so there is no rule to "
            "re-apply to resamples. ",
            "select them with select_key_components().",
        )
    n_layers, n_heads = per_pair.shape[1], per_pair.shape[2]
    counts = torch.zeros(n_layers * n_heads)
    sizes: list[int] = []
    depths: list[float] = []
    share_of = _total(result, key.selection) is not None
    if result.ci_method == "cluster_bootstrap":
        strata = result.pair_operations if len(result.pair_operations) == len(result.pair_templates) else None
        resamples = cluster_bootstrap_indices(result.pair_templates, strata, uncertainty.n_boot, uncertainty.seed)
    else:
        resamples = list(bootstrap_indices(per_pair.shape[0], uncertainty.n_boot, uncertainty.seed))
    for idx in resamples:
        eff = per_pair[idx].double().nanmean(0)
        total = float(result.per_pair_total[idx].double().nanmean()) if share_of else None
        picked = _pick(eff.nan_to_num(nan=0.0), key.selection, total)
        counts[picked] += 1
        sizes.append(len(picked))
        depths.append(median_depth([i // n_heads for i in picked], n_layers))
    share = counts / uncertainty.n_boot
    chosen = {layer * n_heads + head for layer, head in key.heads}
    others = {
        str(Head(i // n_heads, i % n_heads)): round(float(share[i]), 4)
        for i in torch.argsort(share, descending=True).tolist()
        if i not in chosen and float(share[i]) >= min_share
    }
    return dataclasses.replace(
        key,
        stability=tuple(round(float(share[layer * n_heads + head]), 4) for layer, head in key.heads),
        stability_others=others,
        stability_sizes=tuple(sizes),
        stability_depths=tuple(depths),
        stability_n_boot=uncertainty.n_boot,
        stability_seed=uncertainty.seed,
    )
