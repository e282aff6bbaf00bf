"""Transfer (validate): the key heads ablated on data not used to find them."""

from __future__ import annotations

from dataclasses import dataclass

from mathcircuits.ablation import TransferResult
from mathcircuits.report.html import Page, table
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.readings import reading_transfer, reading_unmeasurable
from mathcircuits.report.sections.base import NamedFigure, Section
from mathcircuits.viz import transfer_bars

__all__: list[str] = []


@dataclass(frozen=True)
class TransferSection(Section):
    """The bars of the measured sets; the sets that could not be measured are a note, not empty slots."""

    transfer: TransferResult
    anchor = "transfer"
    title = "Transfer to other data (validate)"

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        return (cls(parts.transfer),) if parts.transfer is not None else ()

    def figures(self) -> tuple[NamedFigure, ...]:
        if not any(r.status == "measured" for r in self.transfer.rows):
            return ()
        return (NamedFigure("transfer", transfer_bars(self.transfer)),)

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        self.start(page)
        page.reading(reading_transfer(self.transfer))
        for f in figures:
            page.figure(f.figure)
        if unmeasurable := reading_unmeasurable(self.transfer):
            page.note(unmeasurable)
        page.table("Transfer", table(self.transfer.to_dataframe()))
