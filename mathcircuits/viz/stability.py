"""How stable the key-head selection is: the share of bootstrap resamples of the pairs that select each head.

Bars for the key heads (dark) and for other heads that resamples select often (light). A key head
near 100% is selected whatever pairs are drawn; one near 50% comes and goes with the sample and
should be read as a candidate, not a finding (``docs/claims.md``).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative

from mathcircuits._errors import FixableValueError
from mathcircuits.models import Head
from mathcircuits.patching import KeyComponents

__all__ = ["selection_stability_bars"]


def selection_stability_bars(key: KeyComponents, *, title: str | None = None) -> go.Figure:
    """Selection frequency of the key heads and of other often-selected heads.

    Shares of resamples, 0..1.

    ValueError when the key components carry no stability (re-run identify).
    """
    if not key.stability_n_boot:
        raise FixableValueError(
            "these key components carry no selection stability. ",
            "re-run identify (it measures it), or call mathcircuits.patching.selection.selection_stability().",
        )
    names = [str(Head(*h)) for h in key.heads] + list(key.stability_others)
    shares = list(key.stability) + list(key.stability_others.values())
    colours = [qualitative.Plotly[1]] * len(key.heads) + ["#bbbbbb"] * len(key.stability_others)
    fig = go.Figure(
        go.Bar(
            x=names,
            y=shares,
            marker_color=colours,
            hovertemplate="%{x}: selected in %{y:.0%} of resamples<extra></extra>",
            showlegend=False,
        )
    )
    fig.add_hline(y=0.5, line=dict(dash="dot", color="#666"), annotation_text="coin flip")
    fig.update_layout(
        title=title
        or f"Key-head selection across {key.stability_n_boot} bootstrap resamples of the pairs<br>"
        f"<sup>dark: selected heads; grey: other heads selected in ≥ 10% of resamples; rule {key.rule}</sup>",
        yaxis=dict(title="share of resamples selecting the head", tickformat=".0%", range=[0, 1.05]),
        xaxis=dict(title="head"),
        height=400,
        width=min(1180, max(520, 46 * len(names) + 240)),  # fits the report at laptop width
    )
    return fig
