"""The key heads and how stable their selection is under resampling of the pairs."""

from __future__ import annotations

from dataclasses import dataclass

from mathcircuits.patching import KeyComponents
from mathcircuits.report.html import Page, esc, plain_text, table
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.readings import reading_stability
from mathcircuits.report.sections.base import NamedFigure, Section
from mathcircuits.viz import selection_stability_bars

__all__: list[str] = []


@dataclass(frozen=True)
class KeySection(Section):
    """The stability bars when the selection was resampled, and the key components' table."""

    key: KeyComponents
    anchor = "key"
    title = "Key heads and how stable the selection is"

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        return (cls(parts.key_components),) if parts.key_components is not None else ()

    def figures(self) -> tuple[NamedFigure, ...]:
        if not self.key.has_stability:
            return ()
        return (NamedFigure("selection_stability", selection_stability_bars(self.key)),)

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        key = self.key
        self.start(page)
        page.reading(reading_stability(key))
        for f in figures:
            page.figure(f.figure)
        params = plain_text(key.rule_params) if key.rule_params else "none"
        page.table(
            "Key components",
            f'<p class="note">{len(key.heads)} key heads ({key.head_fraction:.1%} of all heads) and '
            f"{len(key.mlps)} key MLPs; rule {esc(key.rule)} ({esc(params)}).</p>" + table(key.to_dataframe()),
        )
