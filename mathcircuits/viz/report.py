"""One self-contained HTML report of a run, that opens offline.

The page inlines plotly.js once (in the head) and, when there are attention
views, the CircuitsVis bundle once (a classic script defining the global
``CircuitsVis``); every figure is a ``<div>`` plus a small script. Sections
appear only for the parts given:

1. model and data (model spec, data summary, accuracy table);
2. key components (table, and the selection rule);
3. path patching (one heatmap per operation and one overall, top heads);
4. knockout curves;
5. attention of key heads by role (distributions, means, summary table);
6. MLP probes (similarity curves, one prompt's trajectory, tables);
7. interactive attention views (CircuitsVis);
8. extra figures and notes.

Usage::

    build_report("runs/add/report.html", model_spec=model.spec, accuracy_table=table,
                 patching={"add": res}, key_components=key, knockout=[ko], attention=att,
                 probes=probes, patterns=pats)
"""

from __future__ import annotations

import datetime as _dt
import html
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from mathcircuits._io import atomic_path
from mathcircuits.viz.attention import attention_role_distributions, attention_role_means
from mathcircuits.viz.circuit_graph import add_circuit_section
from mathcircuits.viz.circuits import attention_heads_view, circuitsvis_bundle, split_bundle
from mathcircuits.viz.heatmap import patching_heatmap, patching_heatmaps
from mathcircuits.viz.knockout import knockout_curves
from mathcircuits.viz.probes import probe_case_trajectory, probe_similarity_curves

__all__ = ["build_report", "report_html"]

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0 auto; max-width: 1240px;
       padding: 16px 28px; color: #222; background: #fff; }
h1 { margin-bottom: 4px; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 4px; margin-top: 36px; }
.meta { color: #666; font-size: 0.9em; }
nav { font-size: 0.95em; margin: 10px 0 0; } nav a { margin-right: 14px; color: #444; }
table.tbl { border-collapse: collapse; font-size: 0.86em; margin: 8px 0 14px; }
table.tbl th, table.tbl td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
table.tbl th { background: #f3f3f3; } table.tbl td:first-child, table.tbl th:first-child { text-align: left; }
.row { display: flex; flex-wrap: wrap; gap: 28px; align-items: flex-start; }
.note { color: #555; font-size: 0.92em; max-width: 980px; }
.fig { margin: 10px 0 18px; } details { margin: 6px 0 14px; } summary { cursor: pointer; color: #333; }
"""


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _table(df: Any, max_rows: int = 200) -> str:
    if len(df) > max_rows:
        df = df.head(max_rows)
    return df.to_html(index=False, border=0, classes="tbl", float_format=lambda v: f"{v:.4g}", na_rep="–")


def _kv_table(d: Mapping[str, Any]) -> str:
    rows = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in d.items())
    return f'<table class="tbl">{rows}</table>'


class _Page:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.toc: list[tuple[str, str]] = []
        self.n_figs = 0
        self.has_views = False

    def section(self, anchor: str, title: str) -> None:
        self.toc.append((anchor, title))
        self.parts.append(f'<h2 id="{anchor}">{_esc(title)}</h2>')

    def add(self, text: str) -> None:
        self.parts.append(text)

    def note(self, text: str) -> None:
        self.parts.append(f'<p class="note">{_esc(text)}</p>')

    def figure(self, fig: Any) -> None:
        import plotly.io as pio

        self.n_figs += 1
        self.parts.append(
            '<div class="fig">'
            + pio.to_html(
                fig, full_html=False, include_plotlyjs=False, div_id=f"fig{self.n_figs}", config={"displaylogo": False}
            )
            + "</div>"
        )


def report_html(
    *,
    title: str = "mathcircuits report",
    model_spec: Any = None,
    data_summary: Mapping[str, Any] | None = None,
    accuracy_table: Any = None,
    patching: Any = None,
    patching_overall: Any = None,
    key_components: Any = None,
    knockout: Any = None,
    attention: Any = None,
    probes: Any = None,
    patterns: Any = None,
    extra_figures: Mapping[str, Any] | None = None,
    notes: str | Sequence[str] | None = None,
    circuit: Any = None,
    circuit_faithfulness: Any = None,
) -> str:
    """The report as one HTML string (see :func:`build_report`).

    Args:
        title: the page title.
        model_spec: the model's spec (a ModelSpec or dict), shown as a table.
        data_summary: facts about the data, shown as a table.
        accuracy_table: a DataFrame of accuracy by operation and template.
        patching: a PatchingResult, or a mapping/list of them (one heatmap each).
        patching_overall: the PatchingResult over all pairs (default: combined from ``patching``).
        key_components: the KeyComponents, listed and outlined on the heatmaps.
        knockout: a KnockoutResult, a list of them or {label: result}.
        attention: an AttentionByRole.
        probes: an MLPProbeResult.
        patterns: a HeadPatterns, shown as interactive CircuitsVis views.
        extra_figures: more plotly figures, ``{title: figure}``.
        notes: a note or a list of notes.
        circuit: a Circuit, shown as a graph.
        circuit_faithfulness: the circuit's Faithfulness, shown with it.

    Returns:
        A standalone HTML page (plotly and, when views are shown, CircuitsVis inlined) with a section per
        part given.
    """
    from plotly.offline import get_plotlyjs

    page = _Page()
    # 1. model and data
    if model_spec is not None or data_summary or accuracy_table is not None:
        page.section("model", "Model and data")
        spec = model_spec.to_dict() if hasattr(model_spec, "to_dict") else dict(model_spec or {})
        blocks = []
        if spec:
            blocks.append("<div><h3>Model</h3>" + _kv_table(spec) + "</div>")
        if data_summary:
            blocks.append("<div><h3>Data</h3>" + _kv_table(data_summary) + "</div>")
        page.add('<div class="row">' + "".join(blocks) + "</div>")
        if accuracy_table is not None:
            page.add(
                "<details open><summary>Accuracy by operation and template</summary>"
                + _table(accuracy_table)
                + "</details>"
            )
    # 2. key components
    if key_components is not None:
        page.section("key", "Key components")
        kc = key_components
        page.note(
            f"{len(kc.heads)} key heads ({kc.head_fraction:.1%} of all heads) and {len(kc.mlps)} key MLPs, rule "
            f"{kc.rule!r} {kc.rule_params}."
        )
        page.add(_table(kc.to_dataframe()))
    # 3. path patching
    if patching is not None or patching_overall is not None:
        page.section("patching", "Path patching")
        page.note(
            "Mean effect of patching each head (left) and MLP (right) with its counterfactual activation on the "
            "correct answer; "
            "red = negative = the component matters. Outlined: key components."
        )
        results = (
            patching
            if isinstance(patching, (Mapping, list, tuple))
            else ({"+".join(patching.operations) or "run": patching} if patching is not None else {})
        )
        figs = patching_heatmaps(results, key_components, overall=patching_overall) if results else {}
        if not results and patching_overall is not None:
            figs = {"overall": patching_heatmap(patching_overall, key_components, label="all operations")}
        ordered = ([("overall", figs["overall"])] if "overall" in figs else []) + [
            (k, f) for k, f in figs.items() if k != "overall"
        ]
        for _, fig in ordered:
            page.figure(fig)
        top_source = patching_overall or (
            next(iter(results.values())) if isinstance(results, Mapping) and results else None
        )
        if top_source is not None:
            top = pd.DataFrame(top_source.top_heads(10), columns=["layer", "head", "effect"])
            page.add("<details><summary>Top 10 heads by effect</summary>" + _table(top) + "</details>")
    # 4. knockout
    if knockout is not None:
        page.section("knockout", "Knockout")
        items = (
            list(knockout.values())
            if isinstance(knockout, Mapping)
            else (list(knockout) if isinstance(knockout, (list, tuple)) else [knockout])
        )
        page.figure(knockout_curves(items))

        rows = []
        for ko in items:
            rnd = ko.random_accuracy
            for j, k in enumerate(ko.ks):
                rows.append(
                    {
                        "operation": ko.operation,
                        "k": int(k),
                        "effect rank": float(ko.ranked_accuracy[j]),
                        "random mean": float(rnd[:, j].mean()),
                        "random std": float(rnd[:, j].std()) if rnd.shape[0] > 1 else 0.0,
                    }
                )
        page.add("<details><summary>Knockout accuracies</summary>" + _table(pd.DataFrame(rows)) + "</details>")
    # 5. attention by role
    if attention is not None:
        page.section("attention", "Attention of key heads by token role")
        page.note(
            f"Share of attention from the last position on each role; class rule: share ≥ {attention.min_share} and "
            f"lift over uniform ≥ {attention.min_lift} "
            "(operands A+B vs operator, the larger lift wins)."
        )
        page.figure(attention_role_distributions(attention))
        page.figure(attention_role_means(attention))
        page.add("<details><summary>Per head and operation</summary>" + _table(attention.summary()) + "</details>")
    # 6. MLP probes
    if probes is not None:
        page.section("probes", "MLP probes")
        first = probes.first_raising_layer()
        page.note(
            f"Space: {probes.space}. First layer whose MLP update raises the answer above the other numbers by > "
            "0.25 logits (mean direct effect): "
            f"{'none' if first is None else f'L{first}'}."
        )
        page.figure(probe_similarity_curves(probes))
        page.figure(probe_case_trajectory(probes))
        means = probes.layer_summary()
        page.add(
            "<details><summary>Per-layer means</summary>"
            + _table(means[[c for c in means.columns if not c.endswith("_std")]])
            + "</details>"
        )
        page.add(
            "<details><summary>Chosen prompt, per layer</summary>" + _table(probes.case_dataframe()) + "</details>"
        )
    # 7. CircuitsVis views
    if patterns is not None:
        page.section("views", "Attention patterns of key heads (interactive)")
        page.note(
            "CircuitsVis view: pick a head to enlarge it; hover a token to see where it attends. Rows are "
            "destinations, columns sources."
        )
        for i in range(len(patterns.patterns)):
            view = attention_heads_view(patterns, i)
            fragment, removed = split_bundle(view.fragment)
            page.has_views = page.has_views or removed
            page.add(f"<h3>{_esc(view.title)}</h3>" + f'<div class="cv">{fragment}</div>')
    if circuit is not None:  # the whole circuit (issue #12); the section lives in viz/circuit_graph.py
        add_circuit_section(page, circuit, circuit_faithfulness)
    # 8. extras
    if extra_figures:
        page.section("extra", "More figures")
        for name, fig in extra_figures.items():
            page.add(f"<h3>{_esc(name)}</h3>")
            page.figure(fig)
    if notes:
        page.section("notes", "Notes")
        for n in [notes] if isinstance(notes, str) else notes:
            page.note(n)
    head_scripts = f'<script type="text/javascript">{get_plotlyjs()}</script>\n'
    if page.has_views:
        head_scripts += f'<script type="text/javascript">{circuitsvis_bundle()}</script>\n'
    toc = " ".join(f'<a href="#{a}">{_esc(t)}</a>' for a, t in page.toc)
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta '
        f'charset="utf-8"><title>{_esc(title)}</title>\n<style>{_CSS}</style>\n{head_scripts}</head>\n'
        f'<body>\n<h1>{_esc(title)}</h1><div class="meta">generated {stamp} by mathcircuits · opens offline (scripts '
        f"inlined)</div>\n<nav>{toc}</nav>\n" + "\n".join(page.parts) + "\n</body></html>\n"
    )


def build_report(path: str | os.PathLike, **parts: Any) -> Path:
    """Write the report to ``path`` atomically and return the path.

    Keyword parts (all optional): ``title``, ``model_spec`` (ModelSpec or dict),
    ``data_summary`` (dict), ``accuracy_table`` (DataFrame), ``patching``
    (PatchingResult, or {label: PatchingResult}), ``patching_overall``,
    ``key_components``, ``knockout`` (one, a list or {label: result}),
    ``attention`` (AttentionByRole), ``probes`` (MLPProbeResult), ``patterns``
    (HeadPatterns), ``extra_figures`` ({title: plotly figure}), ``notes``, ``circuit``
    (Circuit) and ``circuit_faithfulness`` (Faithfulness).

    Args:
        path: the HTML file to write.
        **parts: the report's parts, as listed above (passed to :func:`report_html`).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    text = report_html(**parts)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)
