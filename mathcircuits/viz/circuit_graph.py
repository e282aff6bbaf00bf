"""The circuit as an interactive, offline graph, and its report section.

Components are laid out by token position (x: the prompt's roles ``A``, ``op``, ``B``, ``last``, offsets
from the end of the prompt, and the answer positions ``ans1``, …) and by layer (y; the logits on top);
heads sharing a layer and position sit side by side. An edge's width is ``|effect|`` and its colour the sign
(red: the patch lowers the answer's metric, blue: raises it), dashed for key/value edges (they enter a KV
group); hovering an edge's midpoint shows the effect and its interval.
"""

from __future__ import annotations

import plotly.graph_objects as go

from mathcircuits.circuit import Circuit, Faithfulness
from mathcircuits.circuit.batches import label_order

__all__ = ["circuit_graph"]


def _columns(circuit: Circuit) -> list[str]:
    return sorted({n.position for n in circuit.nodes if n.kind != "logits"}, key=label_order)


def circuit_graph(
    circuit: Circuit, faith: Faithfulness | None = None, width: int = 900, height: int = 650
) -> go.Figure:
    """The circuit's nodes and edges as a Plotly figure.

    With ``faith`` the plateau's value goes in the title.
    """
    cols = _columns(circuit)
    L = circuit.model.n_layers
    slots: dict[tuple[int, str], list[str]] = {}
    for n in circuit.nodes:
        if n.kind != "logits":
            slots.setdefault((n.layer, n.position), []).append(n.name)
    xy: dict[str, tuple[float, float]] = {"logits": ((len(cols) - 1) / 2, L + 0.5)}
    for (layer, pos), names in slots.items():
        for i, name in enumerate(sorted(names)):
            offset = (i - (len(names) - 1) / 2) * 0.12
            xy[name] = (cols.index(pos) + offset, layer + (0.3 if name.startswith("MLP") else 0))
    top = max((abs(e.effect) for e in circuit.edges), default=1.0) or 1.0
    fig = go.Figure()
    mid_x, mid_y, mid_text = [], [], []
    for e in circuit.edges:
        (x0, y0), (x1, y1) = xy[e.sender], xy[e.receiver]
        dash = "dash" if e.via in ("k", "v") else "solid"
        colour = "rgba(200,40,40,0.7)" if e.effect < 0 else "rgba(40,80,200,0.7)"
        fig.add_trace(
            go.Scatter(
                x=[x0, x1],
                y=[y0, y1],
                mode="lines",
                line={"width": 1 + 9 * abs(e.effect) / top, "color": colour, "dash": dash},
                hoverinfo="skip",
                showlegend=False,
            )
        )
        mid_x.append((x0 + x1) / 2)
        mid_y.append((y0 + y1) / 2)
        shared = f"<br>KV group shared by heads {list(e.shared_by)}" if e.shared_by else ""
        mid_text.append(
            f"{e.sender} → {e.receiver} ({e.via})<br>effect {e.effect:+.4f} "
            f"[{e.low:+.4f}, {e.high:+.4f}] ({circuit.confidence:.0%}){shared}"
        )
    fig.add_trace(
        go.Scatter(
            x=mid_x, y=mid_y, mode="markers", marker={"size": 6, "color": "rgba(0,0,0,0.25)"},
            hovertext=mid_text, hoverinfo="text", name="edges",
        )
    )  # fmt: skip
    for kind, symbol, colour in (
        ("head", "circle", "#2a9d8f"),
        ("mlp", "square", "#e9c46a"),
        ("logits", "star", "#000"),
    ):
        nodes = [n for n in circuit.nodes if n.kind == kind]
        fig.add_trace(
            go.Scatter(
                x=[xy[n.name][0] for n in nodes],
                y=[xy[n.name][1] for n in nodes],
                mode="markers+text",
                text=[n.component for n in nodes],
                textposition="top center",
                marker={"size": 16 if kind != "logits" else 22, "symbol": symbol, "color": colour},
                hovertext=[f"{n.name}<br>role: {n.role or '?'}<br>depth {n.depth}" for n in nodes],
                hoverinfo="text",
                name=kind,
            )
        )
    title = f"Circuit of {circuit.model.name}: {len(circuit.nodes) - 1} nodes, {len(circuit.edges)} edges"
    if faith is not None and faith.ill_conditioned:
        title += " · faithfulness ill-conditioned"
    elif faith is not None and faith.plateau is not None:
        iv = faith.plateau.faithfulness[faith.primary]
        title += f" · plateau F = {iv.value:.2f} [{iv.low:.2f}, {iv.high:.2f}] ({faith.primary})"
    fig.update_layout(
        title=title,
        width=width,
        height=height,
        template="plotly_white",
        xaxis={"tickvals": list(range(len(cols))), "ticktext": cols, "title": "token position"},
        yaxis={"title": "layer", "range": [-0.5, L + 1]},
        hovermode="closest",
    )
    return fig
