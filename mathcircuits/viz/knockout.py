"""Knockout curves: accuracy as the top-k heads are removed, in effect order vs at random (Zhang et al. 2024, Fig. 3).

Takes knockout results (:class:`~mathcircuits.ablation.KnockoutResult`: ``ks``, ``ranked_accuracy``,
``random_accuracy`` [seed, k], ``baseline_accuracy``, ``operation``, ``n_pairs``). The
effect-ranked curve is a solid line; the random-rank curve is the mean over
seeds, dashed, with a band of ± one standard deviation (the spread of the
random draws) only where there are at least two draws; the ranked curve carries Wilson 95% error bars over
the result's ``n_pairs`` pairs (none when ``n_pairs`` is 0). Every measured k is a marker and an x tick (the
lines only join them). The legend has one entry per operation (at most :data:`MAX_LEGEND`); the subtitle
says which line style is which. A steep drop of the ranked curve next to a flat random band is the paper's
evidence that the few key heads carry the computation.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
import torch
from plotly.colors import qualitative

from mathcircuits._errors import FixableValueError
from mathcircuits.ablation import KnockoutResult
from mathcircuits.stats.interval import wilson_interval

__all__ = [
    "knockout_curves",
]

MAX_LEGEND = 6  # legend entries at most; more operations are named on hover only


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def knockout_curves(results: KnockoutResult | Sequence[KnockoutResult], *, title: str | None = None) -> go.Figure:
    """One figure with a ranked curve, a random mean ± std band and a baseline per knockout result.

    Args:
        results: a :class:`~mathcircuits.ablation.KnockoutResult` or a list/tuple of them.
        title: the figure title (default: names the operations).

    Returns:
        A plotly figure of accuracy against the number of heads knocked out (k), per result.

    Raises:
        ValueError: if there are no results, or a result's ranked accuracies do not match its ``ks``.
    """
    items = list(results) if isinstance(results, (list, tuple)) else [results]
    if not items:
        raise FixableValueError("knockout_curves got no results. ", "pass a KnockoutResult or a list of them.")
    fig = go.Figure()
    palette = qualitative.Plotly
    max_k = 0
    all_ks: set[int] = set()
    bands = False
    in_legend = len(items) <= MAX_LEGEND
    baselines: dict[float, list[str]] = {}
    for i, res in enumerate(items):
        colour = palette[i % len(palette)]
        ks = [int(k) for k in res.ks]
        ranked = [float(a) for a in res.ranked_accuracy]
        rnd = torch.as_tensor(res.random_accuracy, dtype=torch.float32).reshape(-1, len(ks))
        if len(ranked) != len(ks):
            raise FixableValueError(
                f"knockout result for {res.operation!r} has {len(ks)} ks but {len(ranked)} ranked accuracies. ",
                "rebuild it.",
            )
        mean = rnd.mean(0)
        std = (
            rnd.std(0) if rnd.shape[0] > 1 else torch.zeros_like(mean)
        )  # sample std over seeds, as KnockoutResult.to_dataframe
        upper, lower = (mean + std).clamp(max=1.0).tolist(), (mean - std).clamp(min=0.0).tolist()
        op = res.operation
        max_k = max(max_k, max(ks))
        all_ks.update(ks)
        if rnd.shape[0] > 1:  # a band of one draw would be empty
            bands = True
            fig.add_trace(
                go.Scatter(
                    x=ks + ks[::-1],
                    y=upper + lower[::-1],
                    mode="lines",
                    fill="toself",
                    fillcolor=_rgba(colour, 0.18),
                    line=dict(width=0),
                    name=f"{op}: random ± std ({rnd.shape[0]} seeds)",
                    legendgroup=op,
                    showlegend=False,
                    hoverinfo="skip",
                )
            )
        fig.add_trace(
            go.Scatter(
                x=ks,
                y=mean.tolist(),
                mode="lines+markers",
                line=dict(color=colour, dash="dash"),
                marker=dict(size=7, symbol="circle-open"),
                name=f"{op}: random rank (mean)",
                legendgroup=op,
                showlegend=False,
                customdata=std.tolist(),
                hovertemplate=f"{op}, random<br>k=%{{x}} heads<br>"
                "accuracy %{y:.1%} ± %{customdata:.1%}<extra></extra>",
            )
        )
        n = res.n_pairs
        wil = [wilson_interval(round(a * n), n) for a in ranked] if n else []
        err = (
            dict(
                type="data",
                symmetric=False,
                array=[w.high - a for w, a in zip(wil, ranked)],
                arrayminus=[a - w.low for w, a in zip(wil, ranked)],
            )
            if wil
            else None
        )
        fig.add_trace(
            go.Scatter(
                x=ks,
                y=ranked,
                error_y=err,
                mode="lines+markers",
                line=dict(color=colour, width=3),
                marker=dict(size=9),
                name=f"{op}: effect rank",
                legendgroup=op,
                showlegend=in_legend,
                hovertemplate=f"{op}, top heads by effect<br>k=%{{x}} heads<br>accuracy %{{y:.1%}}<extra></extra>",
            )
        )
        fig.add_hline(y=float(res.baseline_accuracy), line=dict(color=colour, dash="dot", width=1))
        baselines.setdefault(round(float(res.baseline_accuracy), 4), []).append(op)
    for value, names in baselines.items():  # one label per distinct baseline, so equal baselines do not overprint
        fig.add_annotation(
            x=1,
            xref="paper",
            xanchor="right",
            y=value,
            yanchor="bottom",
            showarrow=False,
            text=f"baseline {value:.0%} ({', '.join(names)})",
        )
    ops = ", ".join(dict.fromkeys(r.operation for r in items))
    n_draws = sorted({int(torch.as_tensor(r.random_accuracy).reshape(-1, len(r.ks)).shape[0]) for r in items})
    draws = "/".join(map(str, n_draws))
    styles = "solid: top k heads by effect (Wilson 95% bars); dashed: random order (mean of " + (
        f"{draws} orders, band ± 1 std)" if bands else f"{draws} {'order' if n_draws == [1] else 'orders'})"
    )
    fig.update_layout(
        title=title
        or f"Knockout of heads — effect rank vs random rank ({ops})<br><sup>{styles}; points are the measured k</sup>",
        xaxis=dict(
            title="number of heads knocked out (k)",
            range=[-0.5, max_k + 0.5],
            tickmode="array",
            tickvals=sorted(all_ks),
        ),  # fmt: skip
        yaxis=dict(title="accuracy", tickformat=".0%", range=[0, 1.05]),
        height=460,
        width=760,
        hovermode="closest",
        showlegend=in_legend,
    )
    return fig
