"""MLP probe figures (Zhang et al. 2024, §4.2): per-layer similarity curves and one prompt's trajectory.

Both take an :class:`~mathcircuits.analysis.mlp_probes.MLPProbeResult`.
:func:`probe_similarity_curves` has four panels over layers (mean ± std over
pairs): the MLP input against the operands (and other numbers), the MLP update
against the answer and the other numbers, the update's direct effect on the
answer's logit relative to the other numbers, and the logit lens (share of
pairs whose answer is top-1). :func:`probe_case_trajectory` shows, for the
result's chosen prompt, which numbers each layer's MLP update promotes most,
and the answer's logit-lens rank per layer.
"""

from __future__ import annotations

import plotly.graph_objects as go
import torch
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from mathcircuits.analysis import MLPProbeResult
from mathcircuits.data import Operation
from mathcircuits.stats import Interval

__all__ = ["probe_similarity_curves", "probe_case_trajectory"]


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    return "rgba({},{},{},{})".format(*(int(h[i : i + 2], 16) for i in (0, 2, 4)), alpha)


def _bars(ivs: tuple[Interval, ...]) -> dict[str, object]:
    """Asymmetric error bars from each point's interval."""
    return dict(
        type="data",
        symmetric=False,
        array=[iv.high - iv.value for iv in ivs],
        arrayminus=[iv.value - iv.low for iv in ivs],
    )


def _band(
    fig: go.Figure,
    layers: list[int],
    values: torch.Tensor,
    name: str,
    colour: str,
    row: int,
    col: int,
    dash: str | None = None,
    show: bool = True,
) -> None:
    mean, std = values.mean(0), values.std(0, unbiased=False)
    up, lo = (mean + std).tolist(), (mean - std).tolist()
    fig.add_trace(
        go.Scatter(
            x=layers + layers[::-1],
            y=up + lo[::-1],
            mode="lines",
            fill="toself",
            fillcolor=_rgba(colour, 0.15),
            line=dict(width=0),
            legendgroup=name,
            showlegend=False,
            hoverinfo="skip",
        ),
        row=row,
        col=col,
    )
    fig.add_trace(
        go.Scatter(
            x=layers,
            y=mean.tolist(),
            mode="lines+markers",
            name=name,
            legendgroup=name,
            showlegend=show,
            marker=dict(size=4),
            line=dict(color=colour, dash=dash),
            customdata=std.tolist(),
            hovertemplate=f"{name}<br>layer %{{x}}: %{{y:.3f}} ± %{{customdata:.3f}}<extra></extra>",
        ),
        row=row,
        col=col,
    )


def probe_similarity_curves(
    result: MLPProbeResult, operation: Operation | None = None, *, title: str | None = None
) -> go.Figure:
    """Four panels over layers: input cosines, update cosines, direct-effect margin, logit-lens top-1 share.

    Args:
        result: an :class:`~mathcircuits.analysis.MLPProbeResult` from ``mlp_probes``.
        operation: use only this operation's pairs (None: all pairs).
        title: the figure title (default: names the operation, pair count and space).

    Returns:
        A 2x2 plotly figure: cosines as per-layer means ± std over pairs (their spread); the direct margin
        with its bootstrap 95% interval and the top-1 share with its Wilson 95% interval (the uncertainty).

    Raises:
        KeyError: if no pair has ``operation``.
    """
    idx = result.rows(operation)
    layers = list(range(result.n_layers))
    c = qualitative.Plotly
    space = "final-norm (logit-lens) space" if result.space == "lens" else "raw space (ln2 output, raw update)"
    fig = make_subplots(
        rows=2,
        cols=2,
        vertical_spacing=0.2,
        horizontal_spacing=0.1,
        subplot_titles=(
            "MLP input vs W_U of operands",
            "MLP update vs W_U of the answer",
            "direct effect of the update: answer − others",
            "logit lens: answer is top-1",
        ),
    )
    _band(fig, layers, result.input_sim_a[idx], "input · A", c[0], 1, 1)
    _band(fig, layers, result.input_sim_b[idx], "input · B", c[1], 1, 1)
    _band(fig, layers, result.input_sim_others[idx], "input · other numbers", "#7f7f7f", 1, 1, dash="dot")
    _band(fig, layers, result.update_sim_answer[idx], "update · answer C", c[2], 1, 2)
    _band(fig, layers, result.update_sim_others[idx], "update · other numbers", "#7f7f7f", 1, 2, dash="dash")
    margin = result.by_layer("update_direct_margin", operation)
    fig.add_trace(
        go.Bar(
            x=layers,
            y=[iv.value for iv in margin],
            name="direct margin (logits)",
            marker_color=[c[2] if iv.value > 0 else c[1] for iv in margin],
            error_y=_bars(margin),
            customdata=[(iv.low, iv.high) for iv in margin],
            hovertemplate="layer %{x}: %{y:.3f} [%{customdata[0]:.3f}, %{customdata[1]:.3f}] logits<extra></extra>",
        ),
        row=2,
        col=1,
    )
    top1 = result.by_layer("lens_top1", operation)
    median_rank = result.lens_rank[idx].median(0).values
    fig.add_trace(
        go.Scatter(
            x=layers,
            y=[iv.value for iv in top1],
            mode="lines+markers",
            name="answer top-1 (logit lens)",
            line=dict(color=c[3]),
            error_y=_bars(top1),
            customdata=median_rank.tolist(),
            hovertemplate="layer %{x}: top-1 for %{y:.0%} of pairs<br>median rank %{customdata:.0f}<extra></extra>",
        ),
        row=2,
        col=2,
    )
    first = result.first_raising_layer(operation)
    if first is not None:
        fig.add_vline(
            x=first,
            line=dict(dash="dot", color="black"),
            annotation_text=f"first layer with margin > 0.25: L{first}",
            annotation_position="top left",
            row=2,
            col=1,
        )
    dtick = 1 if len(layers) <= 12 else (2 if len(layers) <= 32 else 5)
    for r, col in ((1, 1), (1, 2), (2, 1), (2, 2)):
        fig.update_xaxes(title_text="layer" if r == 2 else None, dtick=dtick, row=r, col=col)
    fig.update_yaxes(title_text="cosine", row=1, col=1)
    fig.update_yaxes(title_text="cosine", row=1, col=2)
    fig.update_yaxes(title_text="logits", row=2, col=1)
    fig.update_yaxes(title_text="share of pairs", tickformat=".0%", range=[0, 1.05], row=2, col=2)
    fig.update_layout(
        title=title
        or f"What MLPs read and write<br><sup>{operation or 'all operations'}, {len(idx)} pairs, "
        f"cosines: mean ± std over pairs, in {space}; margin and top-1: 95% intervals</sup>",
        height=800,
        width=1100,
        legend=dict(orientation="h", yanchor="top", y=-0.1, x=0),
        margin=dict(t=110),
    )
    return fig


def probe_case_trajectory(result: MLPProbeResult, *, title: str | None = None) -> go.Figure:
    """For the chosen prompt, per layer: the top numbers its MLP update promotes (cells) and the answer's lens rank.

    Args:
        result: an :class:`~mathcircuits.analysis.MLPProbeResult` with its case prompt.
        title: the figure title (default: one naming the prompt).

    Returns:
        A Plotly figure: a heatmap of direct effects with the answer's logit-lens rank as a line.
    """
    scores = result.case_top_number_scores.float()
    n_layers, k = scores.shape
    layers = list(range(n_layers))
    labels = result.case_top_numbers
    answer = result.case_answer_label
    # the last layers' updates can be ten times larger than the rest: clip the colours at the 90th percentile
    # (hover shows the true values)
    zmax = float(scores.abs().flatten().quantile(0.9)) or float(scores.abs().max()) or 1.0
    z = scores.T.tolist()  # [rank, layer]
    text = [[labels[l][r] for l in layers] for r in range(k)]
    vocab = [" | ".join(repr(t) for t in result.case_top_tokens[l][:3]) for l in layers]
    hover = [
        [
            f"layer {l}: #{r + 1} promoted number {labels[l][r]!r}<br>direct effect {scores[l, r]:.3f} logits<br>top "
            f"vocabulary tokens: {vocab[l]}"
            for l in layers
        ]
        for r in range(k)
    ]
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        row_heights=[0.62, 0.38],
        vertical_spacing=0.08,
        subplot_titles=(
            "numbers each MLP update promotes most (direct effect on the final logits)",
            "logit-lens rank of the answer after each layer",
        ),
    )
    fig.add_trace(
        go.Heatmap(
            z=z,
            x=layers,
            y=[f"#{r + 1}" for r in range(k)],
            text=text,
            texttemplate="%{text}",
            customdata=hover,
            hovertemplate="%{customdata}<extra></extra>",
            colorscale="RdBu",
            zmid=0,
            zmin=-zmax,
            zmax=zmax,
            colorbar=dict(title=dict(text="logits<br>(blue =<br>promotes;<br>clipped)"), len=0.6, y=0.72),
            xgap=1,
            ygap=1,
        ),
        row=1,
        col=1,
    )
    hits = [(l, r) for l in layers for r in range(k) if labels[l][r] == answer]
    if hits:
        fig.add_trace(
            go.Scatter(
                x=[l for l, _ in hits],
                y=[f"#{r + 1}" for _, r in hits],
                mode="markers",
                name=f"answer {answer!r}",
                marker=dict(symbol="square-open", size=22, color="black", line=dict(width=2.5)),
                hovertemplate="answer promoted at layer %{x}<extra></extra>",
            ),
            row=1,
            col=1,
        )
    ranks = result.lens_rank[result.case_row]
    fig.add_trace(
        go.Scatter(
            x=layers,
            y=(ranks + 1).tolist(),
            mode="lines+markers",
            name="answer rank + 1",
            line=dict(color="black"),
            text=[repr(t) for t in result.case_lens_top],
            hovertemplate="layer %{x}: answer rank %{y} (1 = top)<br>lens top-1: %{text}<extra></extra>",
        ),
        row=2,
        col=1,
    )
    fig.update_yaxes(autorange="reversed", title_text="promotion rank", row=1, col=1)
    top = float(ranks.max()) + 1
    ticks = [v for v in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000) if v <= top * 2]
    fig.update_yaxes(type="log", autorange="reversed", tickvals=ticks, title_text="rank (log, 1 = top)", row=2, col=1)
    fig.update_xaxes(range=[-0.5, n_layers - 0.5], row=1, col=1)
    fig.update_xaxes(title_text="layer", dtick=1 if n_layers <= 32 else 2, range=[-0.5, n_layers - 0.5], row=2, col=1)
    tail = result.case_prompt.splitlines()[-1] if result.case_prompt.strip() else result.case_prompt
    fig.update_layout(
        title=title or f"One prompt through the MLPs: {tail!r} → {result.case_answer}",
        height=620,
        width=max(760, 34 * n_layers + 200),
        legend=dict(orientation="h", yanchor="top", y=-0.1, x=0),
    )
    return fig
