"""Figures of the fine-tuning comparison: the learning-rate sweep (appendix) and accuracy per mode with intervals.

Takes the values the ``compare`` stage writes: the sweep table (:func:`mathcircuits.finetune.effects.sweep_table`: mode,
learning_rate, val_accuracy, val_n, selected) and a :class:`~mathcircuits.stats.DeltaTable` of changes against
base (:func:`mathcircuits.evaluation.compare_table`, or ``.changes`` of :func:`mathcircuits.finetune.effects_table`).
Error bars are the tables' own intervals (Wilson for an accuracy, paired bootstrap for a difference to base).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from mathcircuits.stats import DeltaTable
from mathcircuits.stats.interval import wilson_interval

__all__ = ["sft_delta_bars", "sft_sweep_curves"]


def sft_sweep_curves(sweep: pd.DataFrame, *, title: str = "Learning-rate sweep (validation accuracy)") -> go.Figure:
    """Validation accuracy against learning rate, one line per mode, Wilson bars; the selected rate is a star.

    ``sweep`` has ``mode``, ``learning_rate``, ``val_accuracy``, ``val_n`` and ``selected``; the learning rate is
    on a log scale, ``base`` a dotted horizontal line.
    """
    fig = go.Figure()
    palette = qualitative.Plotly
    for i, (mode, rows) in enumerate(sweep.groupby("mode", sort=False)):
        colour = palette[i % len(palette)]
        ivs = [wilson_interval(round(a * n), int(n)) for a, n in zip(rows["val_accuracy"], rows["val_n"])]
        if mode == "base":
            a = float(rows["val_accuracy"].iloc[0])
            fig.add_hline(y=100 * a, line_dash="dot", line_color="grey", annotation_text=f"base {100 * a:.1f}%")
            continue
        fig.add_trace(
            go.Scatter(
                x=list(rows["learning_rate"]),
                y=[100 * a for a in rows["val_accuracy"]],
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [100 * (iv.high - iv.value) for iv in ivs],
                    "arrayminus": [100 * (iv.value - iv.low) for iv in ivs],
                },
                mode="lines+markers",
                name=str(mode),
                line={"color": colour},
            )
        )
        best = rows[rows["selected"]]
        fig.add_trace(
            go.Scatter(
                x=list(best["learning_rate"]),
                y=[100 * a for a in best["val_accuracy"]],
                mode="markers",
                marker={"symbol": "star", "size": 14, "color": colour},
                showlegend=False,
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        title=title,
        xaxis={"title": "learning rate", "type": "log"},
        yaxis={"title": "validation accuracy (%)"},
        width=760,
        height=460,
    )
    return fig


def sft_delta_bars(table: DeltaTable, metrics: Sequence[str] | None = None, *, title: str | None = None) -> go.Figure:
    """Change against the baseline per row and metric, with the table's intervals.

    One group per metric (None: all), one bar per row other than the baseline.
    """
    benchmarks = list(table.metrics if metrics is None else metrics)
    fig = go.Figure()
    palette = qualitative.Plotly
    for i, label in enumerate(table.compared):
        ivs = [table.change(label, b) for b in benchmarks]
        ys = [iv.value for iv in ivs]
        hi = [iv.high - iv.value for iv in ivs]
        lo = [iv.value - iv.low for iv in ivs]
        fig.add_trace(
            go.Bar(
                x=benchmarks,
                y=ys,
                name=str(label),
                marker_color=palette[i % len(palette)],
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [0.0 if math.isnan(x) else x for x in hi],
                    "arrayminus": [0.0 if math.isnan(x) else x for x in lo],
                },
            )
        )
    fig.update_layout(
        title=title or f"Change against {table.baseline} (points, 95% paired-bootstrap intervals)",
        barmode="group",
        yaxis={"title": "Δ accuracy (points)"},
        width=900,
        height=480,
    )
    return fig
