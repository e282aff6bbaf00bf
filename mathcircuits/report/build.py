"""One self-contained HTML report of a run, that opens offline.

Sections appear only for the parts given, findings first: the claims card (sized to fit the first
screen of a laptop), then one section per stage, each a figure with a one-paragraph reading
(:mod:`.readings`), then interactive views and extra figures, then an appendix with the data
tables. Figures are built once (:func:`~mathcircuits.report.parts.report_figures`); pass them in
when you also save them, so the page and the files hold the same figures.

Usage::

    parts = ReportParts.of(claims=card, model_spec=overall.model, patching={"add": res}, key_components=key)
    build_report("runs/add/report.html", parts)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import plotly.graph_objects as go

from mathcircuits._files import atomic_path
from mathcircuits.models.embedded import weights_note
from mathcircuits.report.html import Page, accuracy_with_intervals, claims_table, kv_table, table
from mathcircuits.report.parts import ReportParts, report_figures
from mathcircuits.report.sections import render_sections

__all__ = ["build_report", "report_html"]


def report_html(parts: ReportParts, figures: Mapping[str, go.Figure] | None = None) -> str:
    """The report as one HTML string (plotly and, when views are shown, CircuitsVis inlined).

    Args:
        parts: the results to show (:class:`ReportParts`; ``ReportParts.of(...)`` takes looser forms).
        figures: their figures, when already built (e.g. to save them too); built here otherwise.

    Returns:
        A standalone HTML page.
    """
    figs = dict(figures) if figures is not None else report_figures(parts)
    page = Page()
    render_sections(page, parts, figs)
    front: list[tuple[str, str]] = []
    if parts.model_spec is not None:
        info = parts.model_spec.to_dict()
        if weights_note(parts.model_spec.name):
            info["weights"] = weights_note(parts.model_spec.name)
        front.append(("Model", kv_table(info)))
    if parts.data_summary:
        front.append(("Data", kv_table(parts.data_summary)))
    if parts.accuracy_table is not None:
        front.append(("Accuracy by operation and template", table(accuracy_with_intervals(parts.accuracy_table))))
    if parts.claims is not None:
        front.append(("Claims, in full", table(claims_table(parts.claims.to_dataframe()))))
    return page.html(parts.page_title, front, list(parts.notes))


def build_report(path: str | os.PathLike, parts: ReportParts, figures: Mapping[str, go.Figure] | None = None) -> Path:
    """Write the report to ``path`` atomically and return the path.

    Args:
        path: the HTML file to write.
        parts: the results to show.
        figures: their figures, when already built.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    text = report_html(parts, figures)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)
