"""The report page as HTML: its builder, its style, and how values become readable text and tables.

A :class:`Page` collects the sections the renderers of :mod:`mathcircuits.report.sections` add
(headings, readings, figures, interactive views, appendix tables); :meth:`Page.html` writes one
self-contained page: plotly.js inlined once in the head, the CircuitsVis bundle once when there
are attention views, every figure a ``<div>`` plus a small script. No value is shown as raw
Python text (:func:`plain_text`): dicts become small tables, lists comma-separated text.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import html
from collections.abc import Mapping

import pandas as pd
import plotly.graph_objects as go

from mathcircuits._codec import EncodedValue
from mathcircuits._errors import FixableTypeError
from mathcircuits.models import Head
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, METHOD_TEXT, format_points, wilson_interval
from mathcircuits.viz import OfflineHTML
from mathcircuits.viz.circuitsvis import circuitsvis_bundle, split_bundle

__all__ = [
    "Page",
]

CARD_END_COLOUR = "#5b2a86"  # the bar that closes the claims card (the screenshot test looks for it)
# On a phone each claim's row is a column: its name, then its verdict (CSS order), then the paper's and this run's
# text, so the verdict is not pushed below a long paragraph.

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0 auto; max-width: 1240px;
       padding: 8px 28px; color: #222; background: #fff; }
h1 { margin: 6px 0 2px; font-size: 1.5em; }
.card h2 { margin-top: 10px; font-size: 1.15em; }
table.claims { border-collapse: collapse; font-size: 0.82em; width: 100%; }
table.claims th, table.claims td { border-bottom: 1px solid #e3e3e3; padding: 4px 8px; text-align: left;
       vertical-align: top; }
table.claims th { background: #f3f3f3; } table.claims td.id { font-weight: 600; white-space: nowrap; }
.verdict { display: inline-block; padding: 1px 7px; border-radius: 9px; font-weight: 600; white-space: nowrap; }
.v-holds { background: #d9f2e1; color: #14532d; } .v-fails { background: #fadbd8; color: #7f1d1d; }
.v-open { background: #fdf0cf; color: #6b4e00; } .v-none { background: #ececec; color: #555; }
.card-end { height: 5px; background: #5b2a86; margin: 2px 0 6px; }
.reading { max-width: 980px; line-height: 1.45; }
h2 { border-bottom: 2px solid #ddd; padding-bottom: 4px; margin-top: 36px; }
.meta { color: #666; font-size: 0.9em; }
nav { font-size: 0.95em; margin: 10px 0 0; } nav a { margin-right: 14px; color: #444; }
table.tbl { border-collapse: collapse; font-size: 0.86em; margin: 8px 0 14px; }
table.tbl th, table.tbl td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
table.tbl th { background: #f3f3f3; } table.tbl td:first-child, table.tbl th:first-child { text-align: left; }
.row { display: flex; flex-wrap: wrap; gap: 28px; align-items: flex-start; }
.note { color: #555; font-size: 0.92em; max-width: 980px; }
.fig { margin: 10px 0 18px; overflow-x: auto; } .fig .plotly-graph-div { min-width: 600px; }
@media (max-width: 600px) { body { padding: 6px 10px; } h1 { font-size: 1.25em; }
       table.claims th { display: none; } table.claims tr { display: flex; flex-direction: column;
       border-bottom: 1px solid #ccc; padding: 5px 0; } table.claims td { display: block; border: 0; padding: 2px 2px;
       order: 2; } table.claims td.id { order: 0; } table.claims td:nth-child(4) { order: 1; }
       table.claims td.id { white-space: normal; } table.claims td:nth-child(2)::before { content: "Paper: ";
       font-weight: 600; } table.claims td:nth-child(3)::before { content: "This run: "; font-weight: 600; } }
details { margin: 6px 0 14px; overflow-x: auto; } summary { cursor: pointer; color: #333; }
"""


def esc(x: object) -> str:
    """``x`` as escaped HTML text."""
    return html.escape(str(x))


def memory_text(peak: object) -> str:
    """A stage's peak memory as people read it: ``"676 MiB (CPU RSS)"``, from a :class:`PeakMemory` or its dict.

    The record comes from the pipeline (:class:`~mathcircuits.pipeline.PeakMemory`), a layer above: it is read
    by its fields (``bytes``, ``how``, ``exact``), so the report imports nothing from there.
    """
    d = _memory_fields(peak)
    if d is None:
        raise FixableTypeError(
            f"memory_text needs a peak-memory record, got a {type(peak).__name__}. ",
            "pass a StageSummary's peak_memory (a PeakMemory or its dict, with bytes and how).",
        )
    how = {"cpu_rss": "CPU RSS", "cuda_allocated": "CUDA allocated"}.get(str(d.get("how")), str(d.get("how")))
    if d.get("exact") is False:
        how += ", sampled"
    return f"{int(d['bytes']) / 2**20:,.0f} MiB ({how})"


def _memory_fields(value: object) -> dict[str, object] | None:
    """The fields of a peak-memory record (a dataclass or a mapping with ``bytes`` and ``how``), else None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        d = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif isinstance(value, Mapping):
        d = dict(value)
    else:
        return None
    return d if {"bytes", "how"} <= set(d) else None


def plain_text(value: object) -> str:
    """A value as readable text for the report: never a Python ``repr`` of a dict, list or tuple.

    Dicts become ``key: value; ...``, sequences ``a, b, c``, floats 4 digits, a ``(layer, head)`` pair
    ``L{layer}.H{head}``.
    """
    if _memory_fields(value) is not None:
        return memory_text(value)
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {plain_text(v)}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, int) for v in value) and len(value) == 2 and isinstance(value, tuple):
            return str(Head(*value))
        return ", ".join(plain_text(v) for v in value) or "none"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _cell(v: object) -> str:
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, Mapping) for x in v):
        return table(accuracy_with_intervals(pd.DataFrame(list(v))))
    return esc(plain_text(v))


def _key(k: str, v: object) -> str:
    if k == "seconds":
        return "time (s)"
    if _memory_fields(v) is not None:
        return "peak memory"
    return k.replace("_", " ")


def kv_table(d: Mapping[str, EncodedValue]) -> str:
    """A two-column table of a mapping (one row per key; ``snake_case`` keys read as words)."""
    rows = "".join(f"<tr><th>{esc(_key(str(k), v))}</th><td>{_cell(v)}</td></tr>" for k, v in d.items())
    return f'<table class="tbl">{rows}</table>'


def table(df: pd.DataFrame, max_rows: int = 200) -> str:
    """A DataFrame as an HTML table (at most ``max_rows`` rows; lists and dicts in cells as plain text)."""
    if len(df) > max_rows:
        df = df.head(max_rows)
    df = df.copy()
    for col in df.columns:
        if df[col].dtype == object:
            df[col] = df[col].map(lambda v: plain_text(v) if isinstance(v, (Mapping, list, tuple)) else v)
        elif pd.api.types.is_extension_array_dtype(df[col]) and df[col].isna().any():  # e.g. an MLP's head: <NA>
            df[col] = df[col].astype(object).where(df[col].notna(), "–")
    return df.to_html(index=False, border=0, classes="tbl", float_format=lambda v: f"{v:.4g}", na_rep="–")


def accuracy_with_intervals(df: pd.DataFrame, confidence: float = DEFAULT_CONFIDENCE) -> pd.DataFrame:
    """An accuracy table with each accuracy as a percentage and its Wilson interval, e.g. ``"75% [62%, 85%]"``.

    Needs columns ``n`` and ``accuracy`` (a fraction), else returned unchanged; the copy's ``accuracy`` column
    becomes ``accuracy (95% Wilson interval)`` text.
    """
    if not {"n", "accuracy"} <= set(df.columns):
        return df
    out = df.copy()

    def cell(n: object, acc: object) -> str:
        if pd.isna(n) or pd.isna(acc) or int(n) == 0:  # type: ignore[arg-type]
            return "–"
        w = wilson_interval(round(float(acc) * int(n)), int(n), confidence)  # type: ignore[arg-type]
        return f"{w.value:.0%} [{w.low:.0%}, {w.high:.0%}]"

    col = f"accuracy ({confidence:.0%} Wilson interval)"
    out.insert(list(out.columns).index("accuracy"), col, [cell(n, a) for n, a in zip(out["n"], out["accuracy"])])
    return out.drop(columns="accuracy")


def _claim_value(value: float, low: float, high: float, unit: str) -> str:
    if pd.isna(value):
        return "–"
    if "points" in unit:
        return format_points(value, low, high)
    if unit.startswith("share"):
        iv = "" if pd.isna(low) else f" [{low:.0%}, {high:.0%}]"
        return f"{value:.0%}{iv}"
    iv = "" if pd.isna(low) else f" [{low:.3g}, {high:.3g}]"
    return f"{value:.3g}{iv}"


def claims_table(df: pd.DataFrame) -> pd.DataFrame:
    """The claims card's full table with each claim's value and interval as one text cell in the claim's unit.

    ``value``, ``low``, ``high`` and ``interval`` become ``value [interval] (method)``.
    """
    out = df.copy()
    cells = [_claim_value(r.value, r.low, r.high, str(r.unit)) for r in out.itertuples()]
    if "interval" in out.columns:  # the method beside the interval it drew
        cells = [
            c if m in ("none", None) or c == "–" else f"{c} ({METHOD_TEXT.get(m, m)})"
            for c, m in zip(cells, out["interval"])
        ]
        out = out.drop(columns=["interval"])
    at = list(out.columns).index("value")
    out = out.drop(columns=["value", "low", "high"])
    out.insert(at, "value [interval]", cells)
    return out


class Page:
    """The report being built: its parts in order, its table of contents and its appendix tables."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.toc: list[tuple[str, str]] = []
        self.appendix: list[tuple[str, str]] = []
        self.n_figs = 0
        self.has_views = False

    def section(self, anchor: str, title: str) -> None:
        """Start a section (a heading in the page and an entry in the table of contents)."""
        self.toc.append((anchor, title))
        self.parts.append(f'<h2 id="{anchor}">{esc(title)}</h2>')

    def add(self, text: str) -> None:
        """Add raw HTML."""
        self.parts.append(text)

    def note(self, text: str) -> None:
        """Add a note (small grey text)."""
        self.parts.append(f'<p class="note">{esc(text)}</p>')

    def reading(self, text: str) -> None:
        """Add the reading of a section (the paragraph above its figure)."""
        self.parts.append(f'<p class="reading">{esc(text)}</p>')

    def figure(self, fig: go.Figure) -> None:
        """Add a plotly figure (plotly.js itself is inlined once, in the head)."""
        import plotly.io as pio

        self.n_figs += 1
        self.parts.append(
            '<div class="fig">'
            + pio.to_html(
                fig,
                full_html=False,
                include_plotlyjs=False,
                div_id=f"fig{self.n_figs}",
                config={"displaylogo": False, "responsive": True},
            )
            + "</div>"
        )

    def view(self, view: OfflineHTML) -> None:
        """Add an interactive CircuitsVis view (its bundle is inlined once, in the head)."""
        fragment, removed = split_bundle(view.fragment)
        self.has_views = self.has_views or removed
        self.add(f"<h3>{esc(view.title)}</h3>" + f'<div class="cv">{fragment}</div>')

    def table(self, name: str, body: str) -> None:
        """Add a table to the appendix (shown folded, in the order added)."""
        self.appendix.append((name, body))

    def html(self, title: str, front: list[tuple[str, str]], notes: list[str]) -> str:
        """The whole page: head (style, plotly.js, CircuitsVis when needed), the parts, then the appendix.

        ``front``: appendix tables that come before those the sections added (model, data, accuracies).
        """
        from plotly.offline import get_plotlyjs

        if front or self.appendix or notes:
            self.section("appendix", "Appendix: data tables")
            for name, body in front + self.appendix:
                self.add(f"<details><summary>{esc(name)}</summary>{body}</details>")
            for n in notes:
                self.note(n)
        head_scripts = f'<script type="text/javascript">{get_plotlyjs()}</script>\n'
        if self.has_views:
            head_scripts += f'<script type="text/javascript">{circuitsvis_bundle()}</script>\n'
        toc = " ".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in self.toc)
        stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta '
            f'charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n{head_scripts}</head>\n"
            f'<body>\n<h1>{esc(title)}</h1><div class="meta">generated {stamp} by mathcircuits · opens offline '
            f"(scripts inlined) · {toc and '<nav>' + toc + '</nav>'}</div>\n"
            + "\n".join(self.parts)
            + "\n</body></html>\n"
        )
