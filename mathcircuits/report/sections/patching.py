"""Path patching (identify): the strongest heads, then one heatmap per operation, the overall one first."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.report.html import Page, table
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.readings import reading_patching
from mathcircuits.report.sections.base import NamedFigure, Section
from mathcircuits.viz import patching_heatmap, patching_heatmaps, patching_top_heads

__all__: list[str] = []


@dataclass(frozen=True)
class PatchingSection(Section):
    """``top`` is the result the strongest heads are read from (:attr:`ReportParts.top_source`); ``key`` is outlined
    on every heatmap."""

    top: PatchingResult
    key: KeyComponents | None = None
    per_operation: Mapping[str, PatchingResult] = field(default_factory=dict)
    overall: PatchingResult | None = None
    anchor = "patching"
    title = "Path patching (identify)"

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        top = parts.top_source
        if top is None:
            return ()
        return (cls(top, parts.key_components, parts.patching, parts.patching_overall),)

    def figures(self) -> tuple[NamedFigure, ...]:
        if self.per_operation:
            maps = patching_heatmaps(self.per_operation, self.key, overall=self.overall)
        else:
            maps = {"overall": patching_heatmap(self.top, self.key, label="all operations")}
        labels = sorted(maps, key=lambda label: label != "overall")  # the overall map first, then per operation
        return (
            NamedFigure("patching_top_heads", patching_top_heads(self.top, key=self.key)),
            *(NamedFigure(f"patching_{label}", maps[label]) for label in labels),
        )

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        self.start(page)
        page.reading(reading_patching(self.top, self.key))
        for f in figures:
            page.figure(f.figure)
        df = self.top.to_dataframe()
        page.table("Strongest 20 heads with intervals", table(df[df.kind == "head"].sort_values("effect").head(20)))
