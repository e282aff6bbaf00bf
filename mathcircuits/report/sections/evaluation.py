"""Fine-tuning and evaluation (evaluate): base vs tuned models on held-out arithmetic and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass

from mathcircuits.claims import Claim
from mathcircuits.report.html import Page, table
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.sections.base import NamedFigure, Section
from mathcircuits.stats import DeltaTable
from mathcircuits.viz import sft_delta_bars

__all__: list[str] = []


@dataclass(frozen=True)
class EvaluationSection(Section):
    """The changes against the base model as bars with intervals; ``c6`` is the card's claim C6, quoted."""

    evaluation: DeltaTable
    c6: Claim | None = None
    anchor = "evaluation"
    title = "Fine-tuning and evaluation (evaluate)"

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        if parts.evaluation is None:
            return ()
        c6 = next((c for c in parts.claims.claims if c.id == "C6"), None) if parts.claims is not None else None
        return (cls(parts.evaluation, c6),)

    def figures(self) -> tuple[NamedFigure, ...]:
        if not self.evaluation.metrics:
            return ()
        return (NamedFigure("evaluation", sft_delta_bars(self.evaluation), saved=False),)

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        c6 = self.c6
        self.start(page)
        page.reading(
            "Accuracy of the base model and of the fine-tuned models (precise SFT of the key heads, full SFT) on "
            "held-out arithmetic and the configured benchmarks; the bars are changes against the base model with "
            "95% paired-bootstrap intervals over the same items; the table is in the appendix. "
            + (f"Claim C6: {c6.measurement} ({c6.verdict})." if c6 is not None else "")
        )
        for f in figures:
            page.figure(f.figure)
        page.table("Evaluation (Table-1 style)", table(self.evaluation.to_dataframe().reset_index()))
