"""The MLP probes (analyze): where the MLPs start to write the answer."""

from __future__ import annotations

from dataclasses import dataclass

from mathcircuits.analysis import MLPProbeResult
from mathcircuits.report.html import Page, table
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.readings import reading_probes
from mathcircuits.report.sections.base import NamedFigure, Section
from mathcircuits.viz import probe_case_trajectory, probe_similarity_curves

__all__: list[str] = []


@dataclass(frozen=True)
class ProbesSection(Section):
    """The similarity curves per layer, then the chosen prompt's trajectory."""

    probes: MLPProbeResult
    anchor = "probes"
    title = "MLP probes (analyze)"

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        return (cls(parts.probes),) if parts.probes is not None else ()

    def figures(self) -> tuple[NamedFigure, ...]:
        return (
            NamedFigure("mlp_probe_curves", probe_similarity_curves(self.probes)),
            NamedFigure("mlp_probe_case", probe_case_trajectory(self.probes)),
        )

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        self.start(page)
        page.reading(reading_probes(self.probes))
        for f in figures:
            page.figure(f.figure)
        means = self.probes.layer_summary()
        page.table("MLP probes, per layer", table(means[[c for c in means.columns if not c.endswith("_std")]]))
        page.table("MLP probes, the chosen prompt per layer", table(self.probes.case_dataframe()))
