"""Figures of the fine-tuning comparison: the learning-rate sweep (appendix) and accuracy per mode with intervals.

Takes the values the ``compare`` stage writes: the sweep table (``compare/sweep.csv``: mode,
learning_rate, val_accuracy, val_n, selected) and a comparison table (per column ``b``: ``b Δ``/``b Δ low``/
``b Δ high``, e.g. :func:`mathcircuits.finetune.effects_table` or :func:`mathcircuits.evaluation.compare_table`,
which also has ``b low``/``b high``). Error bars are the
tables' own intervals (Wilson for an accuracy, paired bootstrap for a difference to base).
"""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from mathcircuits.stats import wilson_interval

__all__ = ["sft_delta_bars", "sft_sweep_curves"]


def sft_sweep_curves(sweep: pd.DataFrame, *, title: str = "Learning-rate sweep (validation accuracy)") -> go.Figure:
    """Validation accuracy against learning rate, one line per mode, Wilson bars; the selected rate is a star.

    Args:
        sweep: a DataFrame with ``mode``, ``learning_rate``, ``val_accuracy``, ``val_n`` and ``selected``.
        title: the figure title.

    Returns:
        A plotly figure (log-scale learning rate; ``base`` as a dotted horizontal line).
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


def sft_delta_bars(table: pd.DataFrame, benchmarks: list[str] | None = None, *, title: str | None = None) -> go.Figure:
    """Change against base per mode and benchmark, with the paired-bootstrap intervals of the table.

    Args:
        table: a :func:`~mathcircuits.evaluation.compare_table` DataFrame (index: model label, first row base).
        benchmarks: which columns (None: every benchmark and average that has a ``Δ low`` column).
        title: the figure title.

    Returns:
        A grouped bar figure (one group per benchmark, one bar per non-base mode).
    """
    if benchmarks is None:
        benchmarks = [c[: -len(" Δ low")] for c in table.columns if c.endswith(" Δ low")]
    fig = go.Figure()
    palette = qualitative.Plotly
    for i, label in enumerate(table.index[1:]):
        row = table.loc[label]
        ys = [float(row[f"{b} Δ"]) for b in benchmarks]
        hi = [float(row[f"{b} Δ high"]) - y for b, y in zip(benchmarks, ys)]
        lo = [y - float(row[f"{b} Δ low"]) for b, y in zip(benchmarks, ys)]
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
        title=title or f"Change against {table.index[0]} (points, 95% paired-bootstrap intervals)",
        barmode="group",
        yaxis={"title": "Δ accuracy (points)"},
        width=900,
        height=480,
    )
    return fig
