"""Figures of the numbers stage: spectra with their null band, κ per depth, the helix planes, the helix patch, grids.

Every function takes result values of :mod:`mathcircuits.numbers` (never a model) and
returns a plotly figure; :func:`numbers_figures` returns them all by file stem, for the
report stage and static export (the report's paragraph is :func:`mathcircuits.report.readings.reading_numbers`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

if TYPE_CHECKING:
    from mathcircuits.numbers import (
        HelixPatchResult,
        HelixResult,
        NeuronResult,
        NumberResults,
        ProbeResult,
        Spectrum,
    )

__all__ = [
    "grid_heatmaps",
    "helix_patch_bars",
    "helix_planes",
    "neuron_topk_curves",
    "probe_curves",
    "spectrum_lines",
]

_PAL = qualitative.Plotly


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    return f"rgba({int(h[0:2], 16)},{int(h[2:4], 16)},{int(h[4:6], 16)},{alpha})"


def spectrum_lines(spec: Spectrum, rows: list[str] | None = None, *, title: str | None = None) -> go.Figure:
    """Power share per period for a few rows, each with its shuffled-order null band and family-wise bound.

    Args:
        spec: a :class:`~mathcircuits.numbers.Spectrum`.
        rows: row labels to draw (default: the first, a middle and the last row; or every row up to 4).
        title: the figure title.

    Returns:
        The figure: x is the frequency (ticks say the period), markers are the periods above the null.
    """
    rows = rows or (
        list(spec.rows) if len(spec.rows) <= 4 else [spec.rows[0], spec.rows[len(spec.rows) // 2], spec.rows[-1]]
    )
    ks = list(range(1, len(spec.periods) + 1))
    fig = go.Figure()
    for c, row in enumerate(rows):
        i, col = spec.row_index(row), _PAL[c % len(_PAL)]
        fig.add_trace(
            go.Scatter(
                x=ks + ks[::-1],
                y=spec.null_high[i].tolist() + spec.null_low[i].tolist()[::-1],
                fill="toself",
                fillcolor=_rgba(col, 0.15),
                line=dict(width=0),
                hoverinfo="skip",
                name=f"{row}: shuffled-order null",
                legendgroup=row,
            )
        )
        fig.add_trace(
            go.Scatter(
                x=ks,
                y=[float(spec.null_max[i])] * len(ks),
                mode="lines",
                legendgroup=row,
                line=dict(color=col, dash="dot", width=1),
                name=f"{row}: family-wise bound",
            )
        )
        err = dict(
            type="data",
            array=(spec.high[i] - spec.power[i]).tolist(),
            arrayminus=(spec.power[i] - spec.low[i]).tolist(),
            width=0,
        )
        fig.add_trace(
            go.Scatter(
                x=ks,
                y=spec.power[i].tolist(),
                error_y=err,
                mode="lines",
                line=dict(color=col),
                name=f"{row}",
                legendgroup=row,
            )
        )
        above = [k for k in ks if bool(spec.above[i, k - 1])]
        fig.add_trace(
            go.Scatter(
                x=above,
                y=[float(spec.power[i, k - 1]) for k in above],
                mode="markers+text",
                text=[f"{spec.periods[k - 1]:g}" for k in above],
                textposition="top center",
                marker=dict(color=col, size=8),
                name=f"{row}: above the null",
                legendgroup=row,
            )
        )
    ticks = [k for k in ks if k in (1, 2, 4, 5, 10, 20, 25, 40, 50) or len(ks) <= 12]
    fig.update_xaxes(
        title="frequency k (label: period N/k)",
        tickvals=ticks,
        ticktext=[f"{k}<br>T={spec.periods[k - 1]:g}" for k in ticks],
    )
    fig.update_yaxes(title="share of power")
    fig.update_layout(
        title=title or f"Spectrum: {spec.source} ({spec.axis}); 95% intervals, shuffled-order null",
        width=980,
        height=460,
        template="plotly_white",
    )
    return fig


def probe_curves(probes: ProbeResult) -> go.Figure:
    """κ of each mod-T probe per depth (left) and the circular digit error (right), with intervals and baselines."""
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            "mod-T probes: Cohen's κ (1 = perfect, 0 = chance)",
            "circular digit probes: error in digits (chance 2.5)",
        ),
    )
    x = list(probes.depths)
    for t, name in enumerate(probes.targets):
        col, panel = _PAL[t % len(_PAL)], 1 if probes.metrics[t] == "kappa" else 2
        err = dict(
            type="data",
            array=(probes.high[t] - probes.score[t]).tolist(),
            arrayminus=(probes.score[t] - probes.low[t]).tolist(),
            width=0,
        )
        fig.add_trace(
            go.Scatter(x=x, y=probes.score[t].tolist(), error_y=err, name=name, line=dict(color=col), legendgroup=name),
            row=1,
            col=panel,
        )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=probes.control[t].tolist(),
                name=f"{name}: control task",
                line=dict(color=col, dash="dash", width=1),
                legendgroup=name,
            ),
            row=1,
            col=panel,
        )
    fig.update_xaxes(title="depth (residual after d blocks; emb = token embedding)")
    fig.update_layout(
        title=f"Probes per depth, cross-validated over contexts ({probes.n_contexts}); 95% bootstrap "
        "intervals; dashed: control task (random relabelling)",
        width=1180,
        height=460,
        template="plotly_white",
    )
    return fig


def helix_planes(helix: HelixResult) -> go.Figure:
    """Each number's mean state in the two Fourier planes of the helix that hold the most variance (best depth)."""
    order = [
        i
        for i in sorted(range(len(helix.periods)), key=lambda i: -float(helix.plane_share[i]))
        if helix.periods[i] != 2
    ][:2]
    titles = [f"T = {helix.periods[i]} plane ({float(helix.plane_share[i]):.0%} of the variance)" for i in order]
    fig = make_subplots(rows=1, cols=max(len(order), 1), subplot_titles=titles or ["no plane"])
    nums = list(helix.numbers)
    for c, i in enumerate(order):
        xy = helix.plane_coords[i]
        fig.add_trace(
            go.Scatter(
                x=xy[:, 0].tolist(),
                y=xy[:, 1].tolist(),
                mode="markers+text",
                text=[str(n) for n in nums],
                textposition="top center",
                textfont=dict(size=8),
                showlegend=False,
                marker=dict(color=nums, colorscale="Viridis", size=7, showscale=c == 0, colorbar=dict(title="n")),
            ),
            row=1,
            col=c + 1,
        )
    d = helix.best_depth
    fig.update_layout(
        title=f"The helix at depth {helix.depths[d]} (best held-out fit, R² {float(helix.r2[d]):.2f}): "
        "mean states projected on the fitted cos/sin directions",
        width=1100,
        height=520,
        template="plotly_white",
    )
    return fig


def helix_patch_bars(patch: HelixPatchResult) -> go.Figure:
    """Mean answer shift of the full, helix, PCA and random patches per depth, with intervals and each random draw."""
    fig = go.Figure()
    for j, cond in enumerate(patch.conditions):
        err = dict(
            type="data",
            array=(patch.high[:, j] - patch.shift[:, j]).tolist(),
            arrayminus=(patch.shift[:, j] - patch.low[:, j]).tolist(),
        )
        fig.add_trace(
            go.Bar(
                x=[f"depth {d}" for d in patch.depths],
                y=patch.shift[:, j].tolist(),
                error_y=err,
                name=cond,
                marker_color=_PAL[j],
            )
        )
    for i, d in enumerate(patch.depths):
        draws = patch.random_draws[i].tolist()
        fig.add_trace(
            go.Scatter(
                x=[f"depth {d}"] * len(draws),
                y=draws,
                mode="markers",
                showlegend=i == 0,
                marker=dict(color="black", size=4),
                name="each random subspace",
            )
        )
    fig.update_yaxes(title="shift of logit(a′+b) − logit(a+b)")
    fig.update_layout(
        barmode="group",
        title=f"Patching a → a′ at a's last token, in subspaces of dimension {patch.k} "
        f"({len(patch.pairs)} pairs; 95% bootstrap intervals)",
        width=980,
        height=460,
        template="plotly_white",
    )
    return fig


def grid_heatmaps(neurons: NeuronResult) -> go.Figure:
    """a × b heatmaps of the example neurons' activations and of the key heads' direct logit contribution."""
    panels = [
        (f"L{l} N{n}: {lab}", m)
        for (l, n), lab, m in zip(neurons.example_neurons, neurons.example_labels, neurons.example_maps)
    ]
    panels += [(f"{h}: direct effect on the answer logit", m) for h, m in zip(neurons.head_labels, neurons.head_maps)]
    if not panels:
        return go.Figure().update_layout(title="no classified neuron and no head to show")
    cols = min(4, len(panels))
    fig = make_subplots(rows=math.ceil(len(panels) / cols), cols=cols, subplot_titles=[t for t, _ in panels])
    for i, (_, m) in enumerate(panels):
        fig.add_trace(
            go.Heatmap(
                z=m.tolist(),
                x=list(neurons.b_values),
                y=list(neurons.a_values),
                showscale=False,
                colorscale="RdBu",
                zmid=0,
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    fig.update_xaxes(title="b")
    fig.update_yaxes(title="a", autorange="reversed")
    fig.update_layout(
        title=f"{neurons.operation}: neuron activations and head contributions over the operand grid",
        width=300 * cols + 100,
        height=320 * math.ceil(len(panels) / cols) + 80,
        template="plotly_white",
    )
    return fig


def neuron_topk_curves(neurons: NeuronResult) -> go.Figure:
    """Accuracy with only each layer's top-k neurons kept, per k (left), and the knockout comparison (right)."""
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.68, 0.32],
        subplot_titles=("only the top-k neurons of one layer kept", "associated vs random knockout"),
    )
    for j, t in enumerate(neurons.topk):
        shown = [i for i, k in enumerate(t.ks) if k > 0]  # k = 0 (layer ablated) has no place on a log axis: named
        acc = [t.accuracy[i] for i in shown]
        err = dict(
            type="data",
            array=[t.high[i] - t.accuracy[i] for i in shown],
            arrayminus=[t.accuracy[i] - t.low[i] for i in shown],
        )
        base = f"; k = 0: {t.accuracy[0]:.2f}" if t.ks and t.ks[0] == 0 else ""
        fig.add_trace(
            go.Scatter(
                x=[t.ks[i] for i in shown],
                y=acc,
                error_y=err,
                name=f"L{t.layer} (k = {t.chosen}{base})",
                line=dict(color=_PAL[j % len(_PAL)]),
            ),
            row=1,
            col=1,
        )
    fig.add_hline(y=1 - neurons.margin, line_dash="dot", row=1, col=1)
    ko = neurons.knockout
    if ko is not None:
        fig.add_trace(
            go.Bar(
                x=["associated", "random (matched)"],
                y=[ko.associated.value, ko.random.value],
                error_y=dict(
                    type="data",
                    array=[ko.associated.high - ko.associated.value, ko.random.high - ko.random.value],
                    arrayminus=[ko.associated.value - ko.associated.low, ko.random.value - ko.random.low],
                ),
                marker_color=[_PAL[1], _PAL[0]],
                showlegend=False,
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(title="k (neurons kept, log scale)", type="log", row=1, col=1)
    fig.update_yaxes(title="accuracy on correct prompts", range=[0, 1.05])
    fig.update_layout(
        title=f"Heuristic neurons ({neurons.operation}, d_mlp = {neurons.d_mlp}; Wilson 95% intervals; "
        f"dotted: 1 − margin)",
        width=1180,
        height=460,
        template="plotly_white",
    )
    return fig


def numbers_figures(numbers: NumberResults) -> dict[str, go.Figure]:
    """Every figure of the numbers stage, by file stem, from the results present.

    Args:
        numbers: the numbers stage's results.

    Returns:
        ``{stem: figure}`` (e.g. ``numbers_spectrum``, ``numbers_kappa``, ``numbers_helix_planes``).
    """
    out: dict[str, go.Figure] = {}
    if numbers.spectra is not None:
        out["numbers_spectrum"] = spectrum_lines(numbers.spectra)
    if numbers.logit_spectra is not None:
        out["numbers_logit_spectrum"] = spectrum_lines(numbers.logit_spectra, list(numbers.logit_spectra.rows[:4]))
    if numbers.probes is not None:
        out["numbers_kappa"] = probe_curves(numbers.probes)
    if numbers.helix is not None:
        out["numbers_helix_planes"] = helix_planes(numbers.helix)
    if numbers.helix_patch is not None:
        out["numbers_helix_patch"] = helix_patch_bars(numbers.helix_patch)
    if numbers.neurons is not None:
        out["numbers_grid_heatmaps"] = grid_heatmaps(numbers.neurons)
        out["numbers_neuron_topk"] = neuron_topk_curves(numbers.neurons)
    return out
