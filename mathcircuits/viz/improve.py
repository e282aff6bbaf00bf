"""Figures of fine-tuning: each mode's training loss, accuracy before and after, and the comparison in units (the
Pareto plot of math gain against generic change).

Takes the values :mod:`mathcircuits.finetune.effects` computes: :func:`~mathcircuits.finetune.effects.pareto_records`
(one :class:`~mathcircuits.finetune.ParetoPoint` per trained unit: mode, phase, learning rate, seed, math gain and
generic change in points against base on the same items, chosen) and the effects table's changes
(a :class:`~mathcircuits.stats.DeltaTable`: per mode, ``math`` and ``generic`` with their intervals). A point
up and to the right improved math and kept (or raised) generic ability; base sits at the origin.

Sweep units (open markers, validation facts, the first generic items) show where each rate lands;
final units at each mode's chosen rate (filled markers, test facts, every generic item, one per
seed) show the spread over seeds; a cross marks each mode's mean over seeds with its 95% intervals
(items and seeds) from the effects table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative

from mathcircuits.stats import DeltaTable, Interval
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, wilson_interval

if TYPE_CHECKING:
    from mathcircuits.finetune import ParetoPoint, SFTResult

__all__ = ["accuracy_before_after", "pareto_plot", "sft_loss_curves"]


def sft_loss_curves(runs: Mapping[str, SFTResult], *, title: str | None = None) -> go.Figure:
    """Training loss by optimizer step, one line per run (e.g. ``{"precise": result, "full": result}``).

    Each line is the run's logged ``loss_history`` (the loss averaged over the steps since the last log); the
    legend gives each run's trainable share of the model's parameters.
    """
    fig = go.Figure()
    for i, (name, run) in enumerate(runs.items()):
        steps, losses = zip(*run.loss_history) if run.loss_history else ((), ())
        share = run.n_trainable / run.n_model_params if run.n_model_params else float("nan")
        fig.add_trace(
            go.Scatter(
                x=list(steps),
                y=list(losses),
                mode="lines+markers",
                name=f"{name} ({share:.1%} of the parameters)",
                line=dict(color=qualitative.Plotly[i % len(qualitative.Plotly)]),
                hovertemplate=f"{name}<br>step %{{x}}: loss %{{y:.3f}}<extra></extra>",
            )
        )
    fig.update_layout(
        title=title or "Training loss by step, per mode<br><sup>the answer tokens' cross-entropy, as logged</sup>",
        xaxis=dict(title="optimizer step", dtick=1),
        yaxis=dict(title="training loss", rangemode="tozero"),
        height=400,
        width=700,
        legend=dict(title="mode"),
    )
    return fig


def accuracy_before_after(
    tables: Mapping[str, pd.DataFrame],
    by: str = "operation",
    confidence: float = DEFAULT_CONFIDENCE,
    *,
    title: str | None = None,
) -> go.Figure:
    """Accuracy per ``by`` group, one bar per model (e.g. before, precise, full), with Wilson intervals.

    ``tables`` maps a model's name to its :func:`~mathcircuits.data.accuracy_table` (columns ``by``, ``n``,
    ``accuracy``), in the order the bars are drawn.
    """
    fig = go.Figure()
    for i, (name, table) in enumerate(tables.items()):
        ivs = [wilson_interval(round(a * n), n, confidence) for a, n in zip(table["accuracy"], table["n"])]
        fig.add_trace(
            go.Bar(
                x=[str(g) for g in table[by]],
                y=[100 * iv.value for iv in ivs],
                name=name,
                marker_color=qualitative.Plotly[i % len(qualitative.Plotly)],
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[100 * (iv.high - iv.value) for iv in ivs],
                    arrayminus=[100 * (iv.value - iv.low) for iv in ivs],
                ),
                customdata=[[100 * iv.low, 100 * iv.high, iv.n] for iv in ivs],
                hovertemplate=f"{name} · %{{x}}: %{{y:.0f}}% [%{{customdata[0]:.0f}}, %{{customdata[1]:.0f}}] of "
                "%{customdata[2]} pairs<extra></extra>",
            )
        )
    fig.update_layout(
        title=title
        or f"Accuracy before and after fine-tuning<br><sup>held-out pairs; {confidence:.0%} Wilson intervals</sup>",
        barmode="group",
        xaxis=dict(title=by),
        yaxis=dict(title="accuracy (%)", range=[0, 100]),
        height=420,
        width=700,
        legend=dict(title="model"),
    )
    return fig


def pareto_plot(
    points: Sequence[ParetoPoint], table: DeltaTable | None = None, *, title: str | None = None
) -> go.Figure:
    """Math gain (y) against generic change (x), one point per (mode, rate, seed); chosen points filled.

    ``points`` from :func:`~mathcircuits.finetune.effects.pareto_records`; ``table`` the ``.changes`` of
    :func:`~mathcircuits.finetune.effects.effects_table` (None: no means with intervals).
    """
    fig = go.Figure()
    palette = qualitative.Plotly
    modes = list(dict.fromkeys(p.mode for p in points))
    for i, mode in enumerate(modes):
        colour = palette[i % len(palette)]
        for phase, filled in (("sweep", False), ("final", True)):
            sel = [p for p in points if p.mode == mode and p.phase == phase]
            if not sel:
                continue
            text = [f"{mode} lr {p.learning_rate:g} seed {p.seed}" for p in sel]
            fig.add_trace(
                go.Scatter(
                    x=[0.0 if math.isnan(p.generic_change) else p.generic_change for p in sel],
                    y=[p.math_gain for p in sel],
                    mode="markers",
                    name=f"{mode} ({'chosen rate, per seed' if filled else 'sweep'})",
                    legendgroup=mode,
                    text=text,
                    hovertemplate="%{text}<br>math %{y:+.1f}<br>generic %{x:+.1f}<extra></extra>",
                    marker={
                        "color": colour if filled else "rgba(0,0,0,0)",
                        "line": {"color": colour, "width": 2},
                        "size": 11 if filled else 9,
                        "symbol": "circle",
                    },
                )
            )
        if table is not None and mode in table.rows:
            gen, mth = table.change(mode, "generic"), table.change(mode, "math")
            x = 0.0 if math.isnan(gen.value) else gen.value
            fig.add_trace(
                go.Scatter(
                    x=[x],
                    y=[mth.value],
                    mode="markers",
                    name=f"{mode} (mean, 95% interval)",
                    legendgroup=mode,
                    marker={"symbol": "x", "size": 14, "color": colour},
                    error_y=_bar(mth),
                    error_x=_bar(gen),
                )
            )
    base = {"symbol": "diamond", "size": 12, "color": "black"}
    fig.add_trace(go.Scatter(x=[0], y=[0], mode="markers", name="base", marker=base))
    fig.add_hline(y=0, line_dash="dot", line_color="grey")
    fig.add_vline(x=0, line_dash="dot", line_color="grey")
    fig.update_layout(
        title=title or "Math gain against generic change, per (mode, learning rate, seed)",
        xaxis={"title": "generic benchmarks: change against base (accuracy points)"},
        yaxis={"title": "held-out arithmetic: gain against base (accuracy points)"},
        width=900,
        height=600,
    )
    return fig


def _bar(iv: Interval) -> dict[str, object]:
    v, lo, hi = iv.value, iv.low, iv.high
    if any(math.isnan(x) for x in (v, lo, hi)):
        return {"visible": False}
    return {"type": "data", "symmetric": False, "array": [hi - v], "arrayminus": [v - lo]}
