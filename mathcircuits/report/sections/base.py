"""What a report section is: its anchor, its title, the figures it builds and how it renders them.

A section holds the typed results it shows; ``of(parts)`` makes it from :class:`~mathcircuits.report.ReportParts`
(none, one, or one per operation). Its figures are built once, by :meth:`Section.figures`, so the report stage can
save the same objects the page embeds; :meth:`Section.render` receives exactly those back. No section reads
another's figures.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import plotly.graph_objects as go

from mathcircuits.report.html import Page
from mathcircuits.report.parts import ReportParts

__all__ = ["NamedFigure", "Section"]


@dataclass(frozen=True)
class NamedFigure:
    """A section's figure with its file stem (``paths.figure(name)``) and whether the report stage saves it."""

    name: str
    figure: go.Figure
    saved: bool = True


class Section(ABC):
    """One section of the report page. Subclasses are frozen dataclasses of the results they show."""

    anchor: str  # the id of its heading, the link in the table of contents
    title: str

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        """The sections of this kind that ``parts`` has results for, in page order (often none or one).

        None by default: a study's own sections are handed to the report by the study
        (:class:`~mathcircuits.pipeline.study.Contribution`), not found in the parts.
        """
        return ()

    def figures(self) -> tuple[NamedFigure, ...]:
        """Its figures, in the order the page shows them (none by default)."""
        return ()

    @abstractmethod
    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        """Add the section to ``page``: heading, reading, ``figures`` (those :meth:`figures` built), tables."""

    def start(self, page: Page) -> None:
        """Its heading, with its entry in the table of contents."""
        page.section(self.anchor, self.title)
