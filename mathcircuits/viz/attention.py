"""Attention of key heads by token role (Zhang et al. 2024, §4.1): distributions and means.

A head's class (operand heads, operator heads, neither) is decided per operation; the token-count
baseline (uniform attention) is marked beside each share.
"""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from mathcircuits._errors import FixableValueError
from mathcircuits.analysis import AttentionByRole
from mathcircuits.data import Operation

__all__ = ["attention_role_distributions", "attention_role_means"]

_CLASS_TITLES = {"operand": "operand heads", "operator": "operator heads", "neither": "other key heads"}


def attention_role_distributions(
    result: AttentionByRole,
    *,
    kind: str = "box",
    classes: tuple[str, ...] | None = None,
    head_classes: Mapping[str, str] | None = None,
    title: str | None = None,
) -> go.Figure:
    """Per-class panels of attention share (last position -> role), one box/violin per role and operation.

    ``classes`` selects the panels (``"operand"``, ``"operator"``, ``"neither"``; default: every class that has
    a head in some operation). ``head_classes`` (head label → class) puts each head in one panel for every
    operation, e.g. the classes claim C3 drew (the report passes them, so the panels agree with the card); heads
    it does not name are left out. Without it each operation classes the heads itself. Each role's uniform
    baseline is marked.
    """
    if kind not in ("box", "violin"):
        raise FixableValueError(f"kind {kind!r} is unknown. ", "use 'box' or 'violin'.")
    ops = result.operation_names()
    if head_classes is None:
        cls_by_op = {op: result.classify(op) for op in ops}
    else:
        fixed = tuple(head_classes.get(label, "") for label in result.labels)
        cls_by_op = {op: fixed for op in ops}
    present = [c for c in ("operand", "operator", "neither") if any(c in v for v in cls_by_op.values())]
    panels = list(classes) if classes is not None else present
    if not panels:
        raise FixableValueError("no head class to show. ", "pass classes=('operand', 'operator', 'neither').")
    members = {
        c: sorted({result.labels[i] for op in ops for i, k in enumerate(cls_by_op[op]) if k == c}) for c in panels
    }
    titles = [f"{_CLASS_TITLES.get(c, c)}: {', '.join(members[c]) or 'none'}" for c in panels]
    fig = make_subplots(rows=1, cols=len(panels), shared_yaxes=True, subplot_titles=titles, horizontal_spacing=0.04)
    roles = list(result.roles)
    palette = qualitative.Plotly
    trace = go.Box if kind == "box" else go.Violin
    for col, c in enumerate(panels, start=1):
        for j, op in enumerate(ops):
            head_idx = [i for i, k in enumerate(cls_by_op[op]) if k == c]
            pairs = [p for p, o in enumerate(result.operations) if o == op]
            xs, ys, text = [], [], []
            for p in pairs:
                for i in head_idx:
                    for r, role in enumerate(roles):
                        xs.append(role)
                        ys.append(float(result.shares[p, i, r]))
                        text.append(f"{result.labels[i]} · pair {result.pair_ids[p]} · {result.template_ids[p]}")
            colour = palette[j % len(palette)]
            common = dict(
                x=xs,
                y=ys,
                name=op,
                legendgroup=op,
                showlegend=col == 1,
                offsetgroup=op,
                marker=dict(color=colour),
                text=text,
                hovertemplate=f"{op} · %{{x}}<br>share %{{y:.3f}}<br>%{{text}}<extra></extra>",
            )
            if kind == "box":
                fig.add_trace(trace(**common, boxpoints="outliers"), row=1, col=col)
            else:
                fig.add_trace(
                    trace(
                        **common,
                        points=False,
                        scalemode="width",
                        spanmode="hard",
                        box_visible=True,
                        meanline_visible=True,
                    ),
                    row=1,
                    col=col,
                )
        base = result.baselines.mean(0).tolist()
        fig.add_trace(
            go.Scatter(
                x=roles,
                y=base,
                mode="markers",
                name="uniform attention (token-count baseline)",
                legendgroup="baseline",
                showlegend=col == 1,
                marker=dict(symbol="line-ew-open", size=30, color="black", line=dict(width=2)),
                hovertemplate="%{x}<br>uniform-attention share %{y:.3f} (mean over all pairs)<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="token role", row=1, col=col)
    fig.update_yaxes(title_text="attention from the last position", range=[0, 1.02], row=1, col=1)
    fig.update_layout(
        title=title
        or "Where key heads look: attention from the last position by token role"
        + ("<br><sup>each head in the class claim C3 gives it</sup>" if head_classes is not None else ""),
        boxmode="group",
        violinmode="group",
        height=480,
        width=min(1180, max(620, 420 * len(panels))),
        legend=dict(title="operation"),
    )
    return fig


def attention_role_means(
    result: AttentionByRole, operation: Operation | None = None, *, title: str | None = None
) -> go.Figure:
    """Heatmap: heads (rows, labelled with their class) x roles, mean attention share over pairs.

    ``operation`` averages over that operation's pairs only (None: all; KeyError when no pair has it).
    """
    mean = result.mean(operation)
    classes = result.classify(operation)
    rows = [f"{lab} ({c})" for lab, c in zip(result.labels, classes)]
    z = mean.tolist()
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=list(result.roles),
            y=rows,
            colorscale="Blues",
            zmin=0,
            zmax=1,
            text=[[f"{v:.2f}" for v in row] for row in z],
            texttemplate="%{text}",
            hovertemplate="%{y}<br>%{x}: mean share %{z:.3f}<extra></extra>",
            colorbar=dict(title=dict(text="share")),
        )
    )
    fig.update_layout(
        title=title or f"Mean attention from the last position by role ({operation or 'all operations'})",
        xaxis=dict(title="token role"),
        yaxis=dict(title="head (class)", autorange="reversed"),
        height=max(300, 36 * len(rows) + 160),
        width=720,
    )
    return fig


def attention_excess(result: AttentionByRole, *, title: str | None = None) -> go.Figure:
    """Bars per key head: attention share on operands (A+B) and on the operator minus the uniform baseline,
    with bootstrap 95% intervals over pairs (from :meth:`AttentionByRole.summary`).

    A bar whose interval lies above 0 is a head attending there more than uniform attention would (claim C3
    compares the attention off the sink with the layer-mates' instead).
    """
    df = result.summary(by_operation=False)
    fig = go.Figure()
    for name, colour in (("operands", qualitative.Plotly[0]), ("operator", qualitative.Plotly[1])):
        # in percentage points, the unit of the reading and of claim C3
        v, lo, hi = (100 * df[f"excess_{name}{end}"] for end in ("", "_low", "_high"))
        fig.add_trace(
            go.Bar(
                x=df["component"].tolist(),
                y=v.tolist(),
                name=f"{name} − uniform",
                marker_color=colour,
                error_y=dict(type="data", symmetric=False, array=(hi - v).tolist(), arrayminus=(v - lo).tolist()),
                customdata=list(zip(lo.tolist(), hi.tolist())),
                hovertemplate=f"%{{x}} {name}: %{{y:+.1f}} points [%{{customdata[0]:+.1f}}, "
                "%{customdata[1]:+.1f}]<extra></extra>",
            )
        )
    fig.add_hline(y=0, line=dict(color="black", width=1))
    fig.update_layout(
        title=title
        or f"Attention above uniform, per key head<br><sup>{len(result.pair_ids)} pairs; bootstrap 95% intervals</sup>",
        barmode="group",
        xaxis=dict(title="key head"),
        yaxis=dict(title="share − uniform baseline (points)", tickformat="+.0f"),
        height=420,
        width=min(1180, max(520, 90 * len(df) + 220)),  # fits the report at laptop width
    )
    return fig
