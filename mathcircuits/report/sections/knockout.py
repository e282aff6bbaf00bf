"""Knockout (validate): accuracy as the top heads are removed, beside random heads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from mathcircuits.ablation import KnockoutResult
from mathcircuits.report.html import Page, table
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.readings import reading_knockout
from mathcircuits.report.sections.base import NamedFigure, Section
from mathcircuits.viz import knockout_curves

__all__: list[str] = []


@dataclass(frozen=True)
class KnockoutSection(Section):
    """One curve per knockout result, ``{label: result}``, and their accuracies in one table."""

    knockout: Mapping[str, KnockoutResult]
    anchor = "knockout"
    title = "Knockout (validate)"

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        return (cls(parts.knockout),) if parts.knockout else ()

    def figures(self) -> tuple[NamedFigure, ...]:
        return (NamedFigure("knockout", knockout_curves(list(self.knockout.values()))),)

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        items = list(self.knockout.values())
        self.start(page)
        page.reading(reading_knockout(items))
        for f in figures:
            page.figure(f.figure)
        frames = []
        for ko in items:
            df = ko.to_dataframe()
            df.insert(0, "operation", ko.operation)
            frames.append(df)
        page.table("Knockout accuracies", table(pd.concat(frames, ignore_index=True)))
