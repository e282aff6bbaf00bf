"""Path-patching heatmaps: layers x heads with the MLP column beside it (Zhang et al. 2024, Fig. 2).

Each cell is a sender's mean effect (a :class:`~mathcircuits.patching.result.PatchingResult`):
negative means patching that head or MLP with the counterfactual lowers the
correct answer, i.e. it matters. Colours are diverging and centred at zero
(red = negative = important, blue = positive); heads and MLPs get separate,
zero-centred colour ranges because MLP effects are often an order of magnitude
larger and would wash the heads out. Key heads and key MLPs (a
:class:`~mathcircuits.patching.selection.KeyComponents`) are outlined, heads with squares and MLPs with diamonds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.models.heads import Head
from mathcircuits.patching import KeyComponents, PatchingResult

__all__ = [
    "patching_top_heads",
    "patching_heatmap",
    "patching_heatmaps",
]

METRIC_LABELS = {
    "answer_logprob": "change of the answer's log-probability (every token)",
    "relative_logit": "relative change of the correct logit",
    "logit_diff": "change of the correct logit",
    "prob_change": "change of the correct probability",
}
DIVERGING = "RdBu"


def _zmax(values: torch.Tensor) -> float:
    finite = values[torch.isfinite(values)]
    top = float(finite.abs().max()) if finite.numel() else 0.0
    return top if top > 0 else 1.0


def _grid(t: torch.Tensor) -> list[list[float | None]]:
    return [[None if not math.isfinite(v) else float(v) for v in row] for row in t.tolist()]


def _bounds(low: Tensor | None, high: Tensor | None, shape: tuple[int, ...]) -> list[list[str]]:
    """Per cell, the interval as text for the hover ("n/a" without per-pair effects)."""
    if low is None or high is None:
        return [["n/a"] * shape[1] for _ in range(shape[0])]
    lo, hi = low.float().cpu(), high.float().cpu()
    return [[f"[{float(lo[i, j]):.4g}, {float(hi[i, j]):.4g}]" for j in range(shape[1])] for i in range(shape[0])]


def patching_top_heads(
    result: PatchingResult, k: int = 15, key: KeyComponents | None = None, *, title: str | None = None
) -> go.Figure:
    """The ``k`` heads with the most negative effect, as bars with their bootstrap 95% intervals.

    Strongest head on top, key heads dark; an error bar crossing 0 is an effect this sample cannot tell from
    none (intervals need per-pair effects).
    """
    top = result.top_heads(k)
    names = [str(Head(l, h)) for l, h, _ in top]
    eff = [e for _, _, e in top]
    have = result.head_low is not None and result.head_high is not None
    lo = [float(result.head_low[l, h]) for l, h, _ in top] if have else eff
    hi = [float(result.head_high[l, h]) for l, h, _ in top] if have else eff
    keyset = set(key.heads) if key is not None else set()
    fig = go.Figure(
        go.Bar(
            y=names,
            x=eff,
            orientation="h",
            marker_color=["#b2182b" if (l, h) in keyset else "#f4a582" for l, h, _ in top],
            error_x=dict(
                type="data",
                symmetric=False,
                array=[b - e for b, e in zip(hi, eff)],
                arrayminus=[e - a for a, e in zip(lo, eff)],
            ),
            customdata=list(zip(lo, hi)),
            hovertemplate="%{y}: %{x:.4g} [%{customdata[0]:.4g}, %{customdata[1]:.4g}]<extra></extra>",
        )
    )
    fig.add_vline(x=0, line=dict(color="black", width=1))
    fmt = ".1%" if result.metric == "relative_logit" else ".2g"
    fig.update_layout(
        title=title
        or f"Strongest heads with bootstrap 95% intervals<br><sup>{result.n_pairs} pairs; dark: key heads</sup>",
        xaxis=dict(title=METRIC_LABELS.get(result.metric, result.metric), tickformat=fmt),
        yaxis=dict(autorange="reversed"),
        height=max(300, 24 * len(top) + 140),
        width=640,
    )
    return fig


def patching_heatmap(
    result: PatchingResult,
    key: KeyComponents | None = None,
    *,
    title: str | None = None,
    label: str | None = None,
    zmax: float | None = None,
    mlp_zmax: float | None = None,
) -> go.Figure:
    """Heatmap of ``result.head_effects`` [layer, head] with ``result.mlp_effects`` as a column beside it.

    Args:
        key: KeyComponents whose heads and MLPs are outlined, or None.
        label: what the map covers, used in the title (default: the result's operations).
        zmax: half-width of the heads' symmetric colour range, in the metric's units (default: the largest
            absolute effect); ``mlp_zmax`` the same for the MLPs.
    """
    heads = result.head_effects.detach().float().cpu()
    mlps = result.mlp_effects.detach().float().cpu()
    n_layers, n_heads = heads.shape
    spec = result.model
    metric = METRIC_LABELS.get(result.metric, result.metric)
    label = label or ", ".join(result.operations) or "all operations"
    z_h = zmax if zmax is not None else _zmax(heads)
    z_m = mlp_zmax if mlp_zmax is not None else _zmax(mlps)
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        column_widths=[0.9, 0.1],
        horizontal_spacing=0.03,
        subplot_titles=("attention heads", "MLPs"),
    )
    layers = list(range(n_layers))
    fig.add_trace(
        go.Heatmap(
            z=_grid(heads),
            x=list(range(n_heads)),
            y=layers,
            coloraxis="coloraxis",
            name="heads",
            xgap=1,
            ygap=1,
            customdata=_bounds(result.head_low, result.head_high, heads.shape),
            hovertemplate="L%{y}.H%{x}<br>effect %{z:"
            + (".2%" if result.metric == "relative_logit" else ".4f")
            + "}<br>95% interval %{customdata}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Heatmap(
            z=_grid(mlps[:, None]),
            x=["MLP"],
            y=layers,
            coloraxis="coloraxis2",
            name="MLPs",
            xgap=1,
            ygap=1,
            hovertemplate="MLP%{y}<br>effect %{z:"
            + (".2%" if result.metric == "relative_logit" else ".4f")
            + "}<extra></extra>",
        ),
        row=1,
        col=2,
    )
    if key is not None:
        key_heads = list(key.heads)
        if key_heads:
            fig.add_trace(
                go.Scatter(
                    x=[h for _, h in key_heads],
                    y=[l for l, _ in key_heads],
                    mode="markers",
                    name="key heads",
                    marker=dict(symbol="square-open", size=14, color="black", line=dict(width=2.5)),
                    text=[f"{Head(l, h)}: {float(heads[l, h]):.4f}" for l, h in key_heads],
                    hovertemplate="key head %{text}<extra></extra>",
                ),
                row=1,
                col=1,
            )
        key_mlps = list(key.mlps)
        if key_mlps:
            fig.add_trace(
                go.Scatter(
                    x=["MLP"] * len(key_mlps),
                    y=key_mlps,
                    mode="markers",
                    name="key MLPs",
                    marker=dict(symbol="diamond-open", size=16, color="black", line=dict(width=2.5)),
                    text=[f"MLP{l}: {float(mlps[l]):.4f}" for l in key_mlps],
                    hovertemplate="key %{text}<extra></extra>",
                ),
                row=1,
                col=2,
            )
    model_name = spec.name
    fmt = ".1%" if result.metric == "relative_logit" else ".2g"
    fig.update_layout(
        title=title
        or f"Path patching — {label}<br><sup>{model_name}, {result.n_pairs} pairs; colour: {metric} "
        "(red = patching lowers the answer)</sup>",
        coloraxis=dict(
            colorscale=DIVERGING,
            cmin=-z_h,
            cmax=z_h,
            cmid=0.0,
            colorbar=dict(title=dict(text="heads"), x=1.02, len=0.85, thickness=14, tickformat=fmt),
        ),
        coloraxis2=dict(
            colorscale=DIVERGING,
            cmin=-z_m,
            cmax=z_m,
            cmid=0.0,
            colorbar=dict(title=dict(text="MLPs"), x=1.17, len=0.85, thickness=14, tickformat=fmt),
        ),
        height=max(480, 22 * n_layers + 240),  # no width: the map fills the page's width (plotly autosizes)
        legend=dict(orientation="h", yanchor="top", y=-0.17, x=0),
        margin=dict(t=110, r=150, b=120),
        meta={"metric": result.metric, "operations": list(result.operations)},
    )
    fig.update_xaxes(title_text="head", dtick=1, row=1, col=1)
    fig.update_yaxes(title_text="layer", autorange="reversed", dtick=1 if n_layers <= 32 else None, row=1, col=1)
    return fig


def patching_heatmaps(
    results: Mapping[str, PatchingResult] | Sequence[PatchingResult],
    key: KeyComponents | None = None,
    overall: PatchingResult | None = None,
) -> dict[str, go.Figure]:
    """One heatmap per operation and one overall, keyed by label ("add", ..., "overall").

    ``results`` maps a label to a PatchingResult (or is a list, labelled by each result's operations).
    ``overall`` is the result over all pairs; when omitted and there are several results it is their
    pair-weighted mean (equal to the overall mean of a per-pair metric), and the title says so. ``key``
    outlines the same key components on every map.
    """
    items = (
        list(results.items())
        if isinstance(results, Mapping)
        else [("+".join(r.operations) or f"run {i}", r) for i, r in enumerate(results)]
    )
    if not items and overall is None:
        raise FixableValueError("patching_heatmaps got no results. ", "pass {operation: PatchingResult}.")
    figs = {label: patching_heatmap(r, key, label=label) for label, r in items}
    if overall is not None:
        figs["overall"] = patching_heatmap(overall, key, label="all operations")
    elif len(items) > 1:
        combined = PatchingResult.merge([dataclasses.replace(r, per_pair_heads=None) for _, r in items])
        figs["overall"] = patching_heatmap(
            combined, key, label="all operations (pair-weighted mean of the per-operation maps)"
        )
    return figs
