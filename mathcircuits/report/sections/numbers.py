"""How numbers are represented and combined (the numbers stage; claims N1–N3, beyond the paper).

The reading is :func:`~mathcircuits.report.readings.reading_numbers`; the figures are those of
:func:`mathcircuits.viz.numbers.numbers_figures`, then the neuron, helix and patch tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from mathcircuits.numbers import NumberResults
from mathcircuits.report.html import Page, table
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.readings import reading_numbers
from mathcircuits.report.sections.base import NamedFigure, Section
from mathcircuits.viz.numbers import numbers_figures

__all__: list[str] = []


@dataclass(frozen=True)
class NumbersSection(Section):
    """The numbers stage's results (those present)."""

    numbers: NumberResults
    anchor = "numbers"
    title = "How numbers are represented and combined (numbers; beyond the paper)"

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        return (cls(parts.numbers),) if parts.numbers else ()

    def figures(self) -> tuple[NamedFigure, ...]:
        return tuple(NamedFigure(name, fig) for name, fig in numbers_figures(self.numbers).items())

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        numbers = self.numbers
        self.start(page)
        page.reading(reading_numbers(numbers))
        for f in figures:
            page.figure(f.figure)
        if numbers.neurons is not None:
            page.table("Heuristic neuron types per layer (top-k)", table(numbers.neurons.type_table()))
        if numbers.helix is not None:
            page.table("Helix vs PCA per depth", table(numbers.helix.to_dataframe()))
        if numbers.helix_patch is not None:
            page.table("Helix patch", table(numbers.helix_patch.to_dataframe()))


def numbers_section(page: Page, numbers: NumberResults) -> None:
    """Add the numbers section to ``page`` on its own: its figures built here, then rendered."""
    section = NumbersSection(numbers)
    section.render(page, section.figures())
