"""More figures: those passed in ``ReportParts.extra_figures``, each under its title (never saved by the stage)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import plotly.graph_objects as go

from mathcircuits.report.html import Page, esc
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.sections.base import NamedFigure, Section

__all__: list[str] = []


@dataclass(frozen=True)
class ExtraSection(Section):
    """``{title: figure}``, in the order given."""

    extra: Mapping[str, go.Figure]
    anchor = "extra"
    title = "More figures"

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        return (cls(parts.extra_figures),) if parts.extra_figures else ()

    def figures(self) -> tuple[NamedFigure, ...]:
        return tuple(NamedFigure(title, fig, saved=False) for title, fig in self.extra.items())

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        self.start(page)
        for f in figures:
            page.add(f"<h3>{esc(f.name)}</h3>")
            page.figure(f.figure)
