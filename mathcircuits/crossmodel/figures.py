"""The comparison page's figures: two models on one plot each, built once from saved results.

Figures read the :class:`~mathcircuits.crossmodel.ModelComparison` and the typed results of
:class:`~mathcircuits.crossmodel.RunResults`; they compute nothing the comparison reports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import plotly.graph_objects as go
import torch
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from mathcircuits.crossmodel.result import ModelComparison, RunResults
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY, wilson_interval

__all__: list[str] = []

COLOURS = (qualitative.Plotly[0], qualitative.Plotly[1])


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    return "rgba({},{},{},{})".format(*(int(h[i : i + 2], 16) for i in (0, 2, 4)), alpha)


def _layout(fig: go.Figure, title: str, height: int = 420) -> go.Figure:
    fig.update_layout(
        title=title, template="plotly_white", height=height, width=900, legend=dict(orientation="h", y=-0.2)
    )
    return fig


def key_head_depths(cmp: ModelComparison) -> go.Figure:
    """Key heads of both models by relative depth (x) and effect (y); each model's median depth with its interval."""
    fig = go.Figure()
    depth = {v.quantity: v for v in cmp.values if v.section == "key heads"}.get(
        "median relative depth of the key heads"
    )
    for i, label in enumerate(cmp.labels):
        rows = [r for r in cmp.key_heads if r.model == label]
        fig.add_trace(
            go.Scatter(
                x=[r.relative_depth for r in rows],
                y=[r.effect for r in rows],
                mode="markers",
                marker=dict(
                    color=COLOURS[i], size=[8 + 10 * (0 if math.isnan(r.stability) else r.stability) for r in rows]
                ),
                name=f"{label} key heads",
                text=[f"L{r.layer}.H{r.head}" for r in rows],
                hovertemplate="%{text}<br>depth %{x:.2f}<br>effect %{y:.3f}<extra>" + label + "</extra>",
            )
        )
        if depth is not None:
            iv = (depth.a, depth.b)[i]
            if not math.isnan(iv.value):
                lo, hi = (iv.value, iv.value) if math.isnan(iv.low) else (iv.low, iv.high)
                fig.add_trace(
                    go.Scatter(
                        x=[iv.value],
                        y=[0.0],
                        error_x=dict(type="data", symmetric=False, array=[hi - iv.value], arrayminus=[iv.value - lo]),
                        mode="markers",
                        marker=dict(color=COLOURS[i], symbol="diamond", size=12),
                        name=f"{label} median depth [{cmp.confidence:.0%} interval]",
                    )
                )
    fig.update_xaxes(title="relative depth, layer / (n_layers − 1)", range=[-0.03, 1.03])
    fig.update_yaxes(title="path-patching effect on the answer logit (negative: matters)")
    return _layout(fig, "Key heads by relative depth (marker size: selection stability)")


def knockout_overlay(runs: Sequence[RunResults], confidence: float = 0.95) -> go.Figure:
    """Accuracy as the top-k heads (solid, Wilson bars) or k random heads (dashed, seed range) are ablated.

    Operations are pooled per model, weighting each by its pairs; k = 0 is the clean accuracy.
    """
    fig = go.Figure()
    for i, run in enumerate(runs):
        kos = list(run.knockout.values())
        if not kos:
            continue
        ks = sorted(set.intersection(*(set(int(k) for k in ko.ks) for ko in kos)))
        n = sum(ko.n_pairs for ko in kos)
        base = sum(ko.baseline_accuracy * ko.n_pairs for ko in kos) / n
        ranked, rnd = [base], [torch.full((1,), base, dtype=torch.float64)]
        for k in ks:
            ranked.append(sum(ko.ranked_accuracy[ko.ks.index(k)] * ko.n_pairs for ko in kos) / n)
            rnd.append(sum(ko.random_accuracy[:, ko.ks.index(k)].double() * ko.n_pairs for ko in kos) / n)
        xs = [0, *ks]
        wil = [wilson_interval(round(a * n), n, confidence) for a in ranked]
        total = run.model.n_layers * run.model.n_heads
        c = COLOURS[i % 2]
        upper, lower = [float(r.max()) for r in rnd], [float(r.min()) for r in rnd]
        fig.add_trace(
            go.Scatter(
                x=xs + xs[::-1],
                y=upper + lower[::-1],
                fill="toself",
                fillcolor=_rgba(c, 0.15),
                line=dict(width=0),
                hoverinfo="skip",
                name=f"{run.label}: random heads, range over seeds",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[float(r.mean()) for r in rnd],
                mode="lines+markers",
                line=dict(color=c, dash="dash"),
                name=f"{run.label}: random heads (mean)",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ranked,
                mode="lines+markers",
                line=dict(color=c, width=3),
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[w.high - a for w, a in zip(wil, ranked)],
                    arrayminus=[a - w.low for w, a in zip(wil, ranked)],
                ),
                name=f"{run.label}: top-k heads by effect (n={n})",
                customdata=[k / total for k in xs],
                hovertemplate="k=%{x} (%{customdata:.1%} of heads)<br>accuracy %{y:.1%}<extra>"
                + run.label
                + "</extra>",
            )
        )
    fig.update_xaxes(title="heads ablated (k)")
    fig.update_yaxes(title="accuracy", range=[0, 1.05], tickformat=".0%")
    return _layout(fig, "Knockout: both models, operations pooled")


def attention_roles(cmp: ModelComparison) -> go.Figure:
    """Each key head's attention on operands and operator above uniform attention, with bootstrap intervals.

    Heads of model A first, each model's ordered by depth.
    """
    rows = [r for r in cmp.key_heads if not math.isnan(r.excess_operands.value)]
    rows.sort(key=lambda r: (cmp.labels.index(r.model), r.relative_depth))
    x = [f"{r.model}<br>L{r.layer}.H{r.head} ({r.role})" for r in rows]
    fig = go.Figure()
    for target, colour in (("operands", qualitative.Safe[0]), ("operator", qualitative.Safe[1])):
        ivs = [getattr(r, f"excess_{target}") for r in rows]
        fig.add_trace(
            go.Bar(
                x=x,
                y=[iv.value for iv in ivs],
                marker_color=colour,
                name=f"excess on {target}",
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[iv.high - iv.value for iv in ivs],
                    arrayminus=[iv.value - iv.low for iv in ivs],
                ),
            )
        )
    fig.add_hline(y=0, line=dict(color="#888", width=1))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title="attention share above uniform", tickformat=".0%")
    return _layout(fig, "Attention roles of the key heads (last position)", height=460)


def mlp_raise(runs: Sequence[RunResults], uncertainty: Uncertainty = DEFAULT_UNCERTAINTY) -> go.Figure:
    """Per relative depth: the MLP update's direct margin on the answer and the logit lens's top-1 share.

    Runs without MLP probes are left out; each model's first raising layer (margin > 0.25) is a dotted line.
    ``uncertainty``'s level is also the top-1 share's Wilson band.
    """
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=("MLP update's direct margin on the answer (logits)", "logit lens: answer top-1"),
    )
    for i, run in enumerate(runs):
        if run.probes is None:
            continue
        depth = [layer / max(1, run.probes.n_layers - 1) for layer in range(run.probes.n_layers)]
        c = COLOURS[i % 2]
        for col, row in (("update_direct_margin", 1), ("lens_top1", 2)):
            ivs = run.probes.by_layer(col, uncertainty=uncertainty)
            hi, lo = [iv.high for iv in ivs], [iv.low for iv in ivs]
            fig.add_trace(
                go.Scatter(
                    x=depth + depth[::-1],
                    y=hi + lo[::-1],
                    fill="toself",
                    fillcolor=_rgba(c, 0.15),
                    line=dict(width=0),
                    hoverinfo="skip",
                    showlegend=False,
                ),
                row=row,
                col=1,
            )
            fig.add_trace(
                go.Scatter(
                    x=depth,
                    y=[iv.value for iv in ivs],
                    mode="lines+markers",
                    line=dict(color=c),
                    name=run.label,
                    showlegend=row == 1,
                    customdata=list(range(run.probes.n_layers)),
                    hovertemplate="L%{customdata} (depth %{x:.2f}): %{y:.3f}<extra>" + run.label + "</extra>",
                ),
                row=row,
                col=1,
            )
        first = run.probes.first_raising_layer()
        if first is not None:
            fig.add_vline(x=first / max(1, run.probes.n_layers - 1), line=dict(color=c, dash="dot"))
    fig.add_hline(y=0.25, line=dict(color="#888", dash="dash", width=1), row=1, col=1)
    fig.update_xaxes(title="relative depth, layer / (n_layers − 1)", row=2, col=1)
    fig.update_yaxes(tickformat=".0%", row=2, col=1)
    return _layout(fig, "Where the MLPs first raise the answer (dotted: first layer above 0.25 logits)", height=620)


def comparison_figures(cmp: ModelComparison, runs: Sequence[RunResults]) -> dict[str, go.Figure]:
    """Every figure of the comparison page, built once: ``{file stem: figure}`` (those without data left out).

    ``runs`` in the comparison's order.
    """
    figs: dict[str, go.Figure] = {}
    if cmp.key_heads:
        figs["key_head_depths"] = key_head_depths(cmp)
    if any(r.knockout for r in runs):
        figs["knockout"] = knockout_overlay(runs, cmp.confidence)
    if any(not math.isnan(r.excess_operands.value) for r in cmp.key_heads):
        figs["attention_roles"] = attention_roles(cmp)
    if any(r.probes is not None for r in runs):
        figs["mlp_raise"] = mlp_raise(runs, Uncertainty(seed=cmp.seed))
    return figs
