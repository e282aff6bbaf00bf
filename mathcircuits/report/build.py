"""One self-contained HTML report of a run, that opens offline.

Sections appear only for the parts given, in the order of :data:`~mathcircuits.report.sections.SECTIONS`,
findings first: the claims card (sized to fit the first screen of a laptop), then one section per stage,
each a figure with a one-paragraph reading (:mod:`.readings`), then interactive views and extra figures,
then an appendix with the data tables. Each section builds its own figures, once (:func:`report_figures`);
pass them in when you also save them, so the page and the files hold the same figures.

Usage::

    parts = ReportParts.of(claims=card, model_spec=overall.model, patching={"add": res}, key_components=key)
    build_report("runs/add/report.html", parts)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go

from mathcircuits._files import atomic_path
from mathcircuits.models.embedded import weights_note
from mathcircuits.report.html import Page, accuracy_with_intervals, claims_table, kv_table, table
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.sections import SECTIONS, NamedFigure, Section

__all__ = [
    "ReportFigures",
    "build_report",
]


@dataclass(frozen=True)
class ReportFigures:
    """Every section of a report in page order, each with the figures it built (built once: saved and embedded)."""

    sections: tuple[tuple[Section, tuple[NamedFigure, ...]], ...]

    def saved(self) -> dict[str, go.Figure]:
        """The figures the report stage also writes as files, by file stem."""
        return {f.name: f.figure for _, figs in self.sections for f in figs if f.saved}


def report_figures(parts: ReportParts, extra: Sequence[Section] = ()) -> ReportFigures:
    """The sections ``parts`` has results for, in page order, then ``extra`` (e.g. a study's own sections), each
    with its figures built."""
    found = tuple(s for kind in SECTIONS for s in kind.of(parts))
    return ReportFigures(tuple((s, s.figures()) for s in (*found, *extra)))


def render_sections(page: Page, figures: ReportFigures) -> None:
    """Add every section to ``page``, in page order, each with the figures it built."""
    for section, figs in figures.sections:
        section.render(page, figs)


def report_html(parts: ReportParts, figures: ReportFigures | None = None) -> str:
    """The report as one HTML string (plotly and, when views are shown, CircuitsVis inlined).

    ``figures``: its sections' figures when already built (e.g. to save them too); built here otherwise.
    """
    page = Page()
    render_sections(page, figures if figures is not None else report_figures(parts))
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
    if parts.costs is not None:
        front.append(("Time and peak memory by study", table(parts.costs)))
    return page.html(parts.page_title, front, list(parts.notes))


def build_report(path: str | os.PathLike, parts: ReportParts, figures: ReportFigures | None = None) -> Path:
    """Write the report to ``path`` atomically and return the path.

    ``figures`` as in :func:`report_html`.
    """
    text = report_html(parts, figures)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)
