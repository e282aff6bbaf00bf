"""The comparison page: one offline HTML file with the tables and figures of a :class:`ModelComparison`.

Findings first: the claims card side by side, the separated differences in one list, then key heads,
knockout, attention roles and the MLPs, each a table and a figure. plotly.js is inlined once.
"""

from __future__ import annotations

import datetime as _dt
import html
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from mathcircuits._files import atomic_path, make_folder
from mathcircuits.crossmodel.figures import comparison_figures
from mathcircuits.crossmodel.result import ModelComparison, RunResults
from mathcircuits.viz import save_figures

__all__: list[str] = []

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0 auto; max-width: 1240px;
       padding: 8px 28px; color: #222; }
h2 { border-bottom: 2px solid #ddd; padding-bottom: 4px; margin-top: 32px; }
table.tbl { border-collapse: collapse; font-size: 0.84em; margin: 8px 0 14px; }
table.tbl th, table.tbl td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
table.tbl th { background: #f3f3f3; }
td.sep { background: #fde9c9; font-weight: 600; }
.note { color: #555; font-size: 0.92em; max-width: 980px; line-height: 1.45; }
"""

_SECTIONS = (
    ("key heads", "Key heads by relative depth", "key_head_depths"),
    ("knockout", "Knockout", "knockout"),
    ("attention", "Attention roles of the key heads", "attention_roles"),
    ("MLPs", "Where the MLPs first raise the answer", "mlp_raise"),
)


def _table(df: pd.DataFrame, mark: str = "difference") -> str:
    """A table; cells of column ``mark`` that name a higher model are highlighted (intervals separate)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = []
    for row in df.itertuples(index=False):
        cells = []
        for col, v in zip(df.columns, row):
            text = f"{v:.4g}" if isinstance(v, float) else str(v)
            cls = ' class="sep"' if col == mark and text.endswith("higher") else ""
            cells.append(f"<td{cls}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table class="tbl"><tr>{head}</tr>{"".join(body)}</table>'


def _figure(fig: go.Figure, n: int) -> str:
    import plotly.io as pio

    return pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=f"fig{n}", config={"displaylogo": False})


def comparison_html(cmp: ModelComparison, figures: Mapping[str, go.Figure]) -> str:
    """The comparison page as one HTML string.

    plotly.js is inlined.

    ``figures`` come from :func:`~mathcircuits.crossmodel.figures.comparison_figures` (built once).
    """
    from plotly.offline import get_plotlyjs

    a, b = cmp.labels
    conf = f"{cmp.confidence:.0%}"
    parts = [
        f"<h1>{html.escape(a)} vs {html.escape(b)}</h1>",
        '<p class="note">'
        + " · ".join(f"{html.escape(s.describe())}, run {html.escape(f)}" for s, f in zip(cmp.models, cmp.folders))
        + f"<br>Every number carries its {conf} interval. A difference is marked (highlighted) only where the two "
        "intervals do not overlap; “overlap” is no evidence of equality. Depths are relative: "
        "layer / (n_layers − 1).</p>",
        "<h2>Claims card, side by side</h2>",
        _table(cmp.claims_table()),
    ]
    sep = cmp.separated()
    parts.append(
        '<p class="note"><b>Separated differences:</b> '
        + (html.escape("; ".join(sep)) if sep else "none: every compared interval overlaps the other model's.")
        + f" Verdicts agree on {sum(c.agree for c in cmp.claims)} of {len(cmp.claims)} claims.</p>"
    )
    values = cmp.to_dataframe()
    n = 0
    for section, title, stem in _SECTIONS:
        rows = values[values.section == section].drop(columns="section")
        if rows.empty and stem not in figures:
            continue
        parts.append(f"<h2>{html.escape(title)}</h2>")
        if not rows.empty:
            parts.append(_table(rows))
        if section == "key heads" and cmp.key_heads:
            parts.append(
                f"<details><summary>Every key head</summary>{_table(cmp.key_heads_table(), mark='')}</details>"
            )
        if stem in figures:
            n += 1
            parts.append(_figure(figures[stem], n))
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(a)} vs {html.escape(b)}</title><style>{_CSS}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head>\n<body>\n'
        + "\n".join(parts)
        + f'\n<p class="note">generated {stamp} by mathcircuits compare-models</p></body></html>\n'
    )


def write_comparison(
    cmp: ModelComparison,
    runs: Sequence[RunResults],
    out_dir: str | os.PathLike,
    formats: Iterable[str] = (),
) -> dict[str, Path]:
    """Write the comparison: ``comparison.json``, ``claims.csv``, ``values.csv``, ``key_heads.csv``,
    ``figures/<name>.html`` (and static formats) and ``comparison.html``; each file atomically.

    ``formats``: static figure formats besides HTML (``png``, ``svg``; they need chromium). Returns
    ``{what: path}`` of the files written.
    """
    out = Path(out_dir)
    make_folder(out / "figures")  # a file in the way is named as the cause
    figures = comparison_figures(cmp, runs)
    written = {"comparison": cmp.save(out / "comparison.json")}
    for name, df in (
        ("claims", cmp.claims_table()),
        ("values", cmp.to_dataframe()),
        ("key_heads", cmp.key_heads_table()),
    ):
        with atomic_path(out / f"{name}.csv") as tmp:
            df.to_csv(tmp, index=False)
        written[name] = out / f"{name}.csv"
    save_figures({out / "figures" / stem: fig for stem, fig in figures.items()}, formats=["html", *formats])
    with atomic_path(out / "comparison.html") as tmp:
        tmp.write_text(comparison_html(cmp, figures), encoding="utf-8")
    written["page"] = out / "comparison.html"
    return written
