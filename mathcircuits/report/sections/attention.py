"""Where the key heads attend from the last position, by token role (analyze)."""

from __future__ import annotations

from dataclasses import dataclass

from mathcircuits.analysis import AttentionByRole
from mathcircuits.report.html import Page, table
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.readings import reading_attention
from mathcircuits.report.sections.base import NamedFigure, Section
from mathcircuits.viz import attention_excess, attention_role_distributions, attention_role_means

__all__: list[str] = []


@dataclass(frozen=True)
class AttentionSection(Section):
    """Attention above the uniform share, its distribution per role, and the role means per head."""

    attention: AttentionByRole
    anchor = "attention"
    title = "Attention of key heads by token role (analyze)"

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        return (cls(parts.attention),) if parts.attention is not None else ()

    def figures(self) -> tuple[NamedFigure, ...]:
        return (
            NamedFigure("attention_excess", attention_excess(self.attention)),
            NamedFigure("attention_roles", attention_role_distributions(self.attention)),
            NamedFigure("attention_means", attention_role_means(self.attention), saved=False),
        )

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        self.start(page)
        page.reading(reading_attention(self.attention))
        for f in figures:
            page.figure(f.figure)
        page.table("Attention per head and operation", table(self.attention.summary()))
