"""Figures of the fine-tuning comparison: the learning-rate sweep (appendix) and accuracy per mode with intervals.

Takes the values the ``compare`` stage computes: the sweep's points (:func:`mathcircuits.finetune.sweep_records`:
mode, learning rate, validation accuracy with its interval, selected) and a :class:`~mathcircuits.stats.DeltaTable`
of changes against base (:func:`mathcircuits.evaluation.compare_table`, or ``.changes`` of
:func:`mathcircuits.finetune.effects_table`).
Error bars are the tables' own intervals (Wilson for an accuracy, paired bootstrap for a difference to base).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.colors import qualitative

from mathcircuits.stats import DeltaTable

if TYPE_CHECKING:
    from mathcircuits.finetune import SweepPoint

__all__ = ["sft_delta_bars", "sft_sweep_curves"]


def sft_sweep_curves(
    sweep: Sequence[SweepPoint], *, title: str = "Learning-rate sweep (validation accuracy)"
) -> go.Figure:
    """Validation accuracy against learning rate, one line per mode, Wilson bars; the selected rate is a star.

    ``sweep`` from :func:`~mathcircuits.finetune.sweep_records`; the learning rate is on a log scale, ``base`` a
    dotted horizontal line.
    """
    fig = go.Figure()
    palette = qualitative.Plotly
    modes: dict[str, list[SweepPoint]] = {}
    for p in sweep:
        modes.setdefault(p.mode, []).append(p)
    for i, (mode, rows) in enumerate(modes.items()):
        colour = palette[i % len(palette)]
        ivs = [p.accuracy for p in rows]
        if mode == "base":
            a = ivs[0].value
            fig.add_hline(y=100 * a, line_dash="dot", line_color="grey", annotation_text=f"base {100 * a:.1f}%")
            continue
        fig.add_trace(
            go.Scatter(
                x=[p.learning_rate for p in rows],
                y=[100 * iv.value for iv in ivs],
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
        best = [p for p in rows if p.selected]
        fig.add_trace(
            go.Scatter(
                x=[p.learning_rate for p in best],
                y=[100 * p.accuracy.value for p in best],
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
