"""The fair SFT comparison (compare): every mode at its own best learning rate, several seeds, the Pareto figure."""

from __future__ import annotations

from dataclasses import dataclass

from mathcircuits.claims import Claim
from mathcircuits.finetune import EffectsTable, ParetoPoint, SweepPoint
from mathcircuits.report.html import Page, table
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.sections.base import NamedFigure, Section
from mathcircuits.viz import pareto_plot, sft_delta_bars, sft_sweep_curves

__all__: list[str] = []


@dataclass(frozen=True)
class CompareSection(Section):
    """``points`` (one per trained unit) make the Pareto figure; ``power`` is the comparison's power statement;
    ``claims`` are the card's C6 and C6b, whose verdicts the reading quotes."""

    comparison: EffectsTable
    sweep: tuple[SweepPoint, ...] | None = None
    points: tuple[ParetoPoint, ...] | None = None
    power: str = ""
    claims: tuple[Claim, ...] = ()
    anchor = "compare"
    title = "Fine-tuning compared at each mode's best learning rate (compare)"

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        if parts.comparison_table is None:
            return ()
        card = parts.claims.claims if parts.claims is not None else ()
        c6 = tuple(c for c in card if c.id in ("C6", "C6b"))
        return (
            cls(parts.comparison_table, parts.comparison_sweep, parts.comparison_points, parts.comparison_power, c6),
        )

    def figures(self) -> tuple[NamedFigure, ...]:
        changes, figs = self.comparison.changes, []
        if self.points:
            figs.append(NamedFigure("compare_pareto", pareto_plot(self.points, changes), saved=False))
        figs.append(NamedFigure("compare", sft_delta_bars(changes), saved=False))
        if self.sweep is not None:
            figs.append(NamedFigure("compare_sweep", sft_sweep_curves(self.sweep), saved=False))
        return tuple(figs)

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        self.start(page)
        page.reading(
            "Every mode trained on the same data, steps and batch; each at the learning rate that scored best on "
            "validation facts, then trained longer with several seeds. Math is held-out arithmetic on facts "
            "(operation, a, b) never trained in any wording; generic ability is likelihood benchmarks through "
            "lm-eval. The Pareto figure has one point per (mode, rate, seed): open markers are the sweep, filled "
            "ones the chosen rate per seed, crosses each mode's mean with 95% intervals over items and seeds. "
            + (f"{self.power}. " if self.power else "")
            + " ".join(f"Claim {c.id}: {c.verdict}." for c in self.claims)
        )
        for f in figures:
            page.figure(f.figure)
        if self.sweep is not None:
            page.table("Learning-rate sweep", table(SweepPoint.frame(self.sweep)))
        page.table("Fine-tuning comparison", table(self.comparison.to_dataframe().reset_index()))
