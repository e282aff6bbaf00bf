"""Figures of the fine-tuning comparison in units: the Pareto plot of math gain against generic change.

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
from collections.abc import Sequence
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.colors import qualitative

from mathcircuits.stats import DeltaTable, Interval

if TYPE_CHECKING:
    from mathcircuits.finetune import ParetoPoint

__all__ = ["pareto_plot"]


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
