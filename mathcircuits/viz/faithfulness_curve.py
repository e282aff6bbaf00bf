"""The faithfulness curve: circuit size against faithfulness, with the random band.

One line per evaluation (``resample/edges``, ``position_mean/nodes``, …) with its interval as error
bars; the primary evaluation's depth-matched random circuits as a shaded band (the central 95% of the
draws) with their mean dashed; the plateau circuit marked. 0 is the counterfactual run, 1 the model.
An ill-conditioned result (too small a behaviour to divide by) shows its denominator and no curve.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import plotly.graph_objects as go

if TYPE_CHECKING:
    from mathcircuits.circuit import Faithfulness

__all__ = ["faithfulness_curve"]

_COLOURS = ["#1d3557", "#e76f51", "#2a9d8f", "#8d6e63"]


def faithfulness_curve(faith: Faithfulness, width: int = 900, height: int = 520) -> go.Figure:
    """The curve of a :class:`~mathcircuits.circuit.Faithfulness` as a Plotly figure."""
    fig = go.Figure()
    ops = ", ".join(faith.operations)
    gap = faith.denominator.format("{:.2f}")
    if faith.ill_conditioned:
        fig.update_layout(
            title=f"Faithfulness ({ops}): ill-conditioned, m(M) − m(cf) = {gap} nats ({faith.rule})",
            width=width, height=height, template="plotly_white",
        )  # fmt: skip
        return fig
    sizes = [p.size for p in faith.curve]
    band = [p.band(faith.confidence) for p in faith.curve]
    have = [i for i, b in enumerate(band) if b[0] == b[0]]
    if have:
        xs = [sizes[i] for i in have]
        fig.add_trace(go.Scatter(x=xs, y=[band[i][2] for i in have], mode="lines", line={"width": 0},
                                 showlegend=False, hoverinfo="skip"))  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=xs, y=[band[i][1] for i in have], mode="lines", line={"width": 0}, fill="tonexty",
                fillcolor="rgba(120,120,120,0.25)", name=f"random circuits ({faith.primary}, central 95%)",
            )
        )  # fmt: skip
        mean = [band[i][0] for i in have]
        dashed = {"dash": "dash", "color": "#777"}
        fig.add_trace(go.Scatter(x=xs, y=mean, mode="lines", line=dashed, name="random circuits, mean"))
    keys = list(faith.curve[0].faithfulness)
    for j, key in enumerate(keys):
        ivs = [p.faithfulness[key] for p in faith.curve]
        fig.add_trace(
            go.Scatter(
                x=sizes, y=[iv.value for iv in ivs], mode="lines+markers", name=key,
                line={"color": _COLOURS[j % len(_COLOURS)], "width": 3 if key == faith.primary else 1.5,
                      "dash": "solid" if key.endswith("edges") else "dot"},
                error_y={"type": "data", "symmetric": False, "array": [iv.high - iv.value for iv in ivs],
                         "arrayminus": [iv.value - iv.low for iv in ivs]},
                customdata=[[p.n_nodes] for p in faith.curve],
                hovertemplate="%{x} edges (%{customdata[0]} nodes): F = %{y:.3f}<extra>" + key + "</extra>",
            )
        )  # fmt: skip
    fig.add_vline(x=faith.plateau_size, line={"dash": "dot", "color": "#2a9d8f"},
                  annotation_text=f"plateau: {faith.plateau_size}", annotation_position="top left")  # fmt: skip
    for y in (0.0, 1.0):
        fig.add_hline(y=y, line={"color": "#bbb", "width": 1})
    unit = "edges" if faith.primary.endswith("edges") else "nodes"
    fig.update_layout(
        title=(f"Faithfulness vs circuit size ({ops}; {faith.n_pairs} pairs, intervals over {faith.interval_over}; "
               f"m(M) − m(cf) = {gap} nats)"),
        xaxis={"title": f"circuit size (top-n {unit}, strongest first, connected to the logits)"},
        yaxis={"title": "faithfulness  (m(C) − m(cf)) / (m(M) − m(cf))"},
        width=width, height=height, template="plotly_white", hovermode="closest",
    )  # fmt: skip
    return fig
