"""Transfer of the key heads to other data: accuracy on each set's clean-correct items, ablated (paper §3.4).

One group of bars per evaluation set: the key-ablated and the random-ablated accuracy on the
items the clean model answers correctly, with their Wilson 95% intervals (the random one widened
to every random draw). Only measured sets are drawn: a set the clean model answers too rarely is
*not measurable on this model*, and the report lists it in text under the chart
(:func:`mathcircuits.report.readings.reading_unmeasurable`), never as an empty slot.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative

from mathcircuits.ablation import TransferResult

__all__ = ["transfer_bars"]


def transfer_bars(result: TransferResult, *, title: str | None = None) -> go.Figure:
    """Key- vs random-ablated accuracy per transfer set, with 95% intervals.

    x labels name each set, whether it found the heads (held in) and its clean-correct items. With no measured
    set, an empty chart that says so.
    """
    rows = [r for r in result.rows if r.status == "measured"]
    labels = []
    for r in rows:
        tag = " (found the heads)" if r.held_in else ""
        labels.append(f"{r.dataset}{tag}<br>{r.n_correct} clean-correct items")
    fig = go.Figure()
    for key, name, colour in (
        ("key", "key heads ablated", qualitative.Plotly[1]),
        ("random", f"{result.n_random} random head sets ablated", qualitative.Plotly[0]),
    ):
        ivs = [r.key if key == "key" else r.random for r in rows]
        acc, lo, hi = [iv.value for iv in ivs], [iv.low for iv in ivs], [iv.high for iv in ivs]
        fig.add_trace(
            go.Bar(
                x=labels,
                y=acc,
                name=name,
                marker_color=colour,
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=[h - a for h, a in zip(hi, acc)],
                    arrayminus=[a - low for low, a in zip(lo, acc)],
                ),
                customdata=list(zip(lo, hi)),
                hovertemplate="%{x}<br>accuracy %{y:.0%} [%{customdata[0]:.0%}, %{customdata[1]:.0%}]<extra></extra>",
            )
        )
    fig.update_layout(
        title=title
        or "Transfer: accuracy on the items the clean model answers, with heads ablated<br>"
        "<sup>1.0 = nothing lost; Wilson 95% intervals</sup>",
        barmode="group",
        yaxis=dict(title="accuracy on clean-correct items", tickformat=".0%", range=[0, 1.08]),
        height=460,
        width=min(1180, max(620, 190 * len(rows) + 200)),  # fits the report at laptop width
    )
    if not rows:
        fig.add_annotation(text="no set measurable on this model", showarrow=False, x=0.5, y=0.5, xref="paper",
                           yref="paper")  # fmt: skip
    return fig
