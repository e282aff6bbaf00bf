"""Interactive CircuitsVis views of the key heads' attention, one per recorded prompt (no plotly figures)."""

from __future__ import annotations

from dataclasses import dataclass

from mathcircuits.analysis import HeadPatterns
from mathcircuits.report.html import Page
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.sections.base import NamedFigure, Section
from mathcircuits.viz import attention_heads_view

__all__: list[str] = []


@dataclass(frozen=True)
class ViewsSection(Section):
    """The recorded attention patterns; the views are written into the page, not built as figures."""

    patterns: HeadPatterns
    anchor = "views"
    title = "Attention patterns of key heads (interactive)"

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        return (cls(parts.patterns),) if parts.patterns is not None else ()

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        self.start(page)
        page.note(
            "CircuitsVis view: pick a head to enlarge it; hover a token to see where it attends. Rows are "
            "destinations, columns sources."
        )
        for i in range(len(self.patterns.patterns)):
            page.view(attention_heads_view(self.patterns, i))
