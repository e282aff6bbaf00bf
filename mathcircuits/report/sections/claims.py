"""The claims card, first on the page: one row per claim (claim, the paper's number, this run, verdict)."""

from __future__ import annotations

from dataclasses import dataclass

from mathcircuits.claims import ClaimsCard, Verdict
from mathcircuits.claims.rules import rule_text
from mathcircuits.models import ModelSpec
from mathcircuits.models.embedded import weights_note
from mathcircuits.report.html import Page, esc
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.sections.base import NamedFigure, Section

__all__: list[str] = []

#: The CSS class that colours each verdict on the card.
VERDICT_CLASS: dict[Verdict, str] = {
    Verdict.HOLDS: "v-holds",
    Verdict.PARTLY: "v-open",
    Verdict.FAILS: "v-fails",
    Verdict.INCONCLUSIVE: "v-open",
    Verdict.NOT_MEASURED: "v-none",
    Verdict.NOT_TESTABLE: "v-none",
}


@dataclass(frozen=True)
class ClaimsSection(Section):
    """The card, closed by a bar; with the run's ``model``, a line above it names the model and, for an embedded
    model, its quantisation (the verdicts are those of that copy)."""

    card: ClaimsCard
    model: ModelSpec | None = None
    anchor = "claims"
    title = "Claims"

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        return (cls(parts.claims, parts.model_spec),) if parts.claims is not None else ()

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        rows = []
        for c in self.card.claims:
            rows.append(
                f'<tr><td class="id" title="{esc(c.statement)}">{esc(c.id)} {esc(c.title)}'
                f"{'<br><small>beyond the paper</small>' if c.beyond_paper else ''}</td>"
                f"<td>{esc(c.paper)}</td><td>{esc(c.measurement)}"
                f"{f'<br><small>{esc(c.interval_text)}</small>' if c.interval_text else ''}"
                f"{f'<br><small>{esc(c.preset_text)}</small>' if c.preset_text else ''}</td>"
                f'<td><span class="verdict {VERDICT_CLASS[c.verdict]}" title="{esc(c.reason)}">{esc(c.verdict)}'
                "</span></td></tr>"
            )
        head = (
            "<tr><th>Claim (Zhang et al. 2024)</th><th>Paper</th>"
            f"<th>This run ({self.card.confidence:.0%} intervals)</th><th>Verdict</th></tr>"
        )
        about = ""
        if self.model is not None:
            weights = weights_note(self.model.name)
            about = f"<p>Measured on {esc(self.model.name)}{esc(f' ({weights})' if weights else '')}.</p>"
        page.add(
            f'<section class="card" id="{self.anchor}"><h2>Claims card</h2>{about}'
            f'<table class="claims">{head}{"".join(rows)}</table><div class="card-end"></div>'
            "<details><summary>Why each verdict (rules in docs/claims.md)</summary><ul>"
            + "".join(
                f"<li>{esc(c.id)}: {esc(c.reason)}"
                + (f'<br><small class="rule">rule: {esc(rule)}</small>' if (rule := rule_text(c.id)) else "")
                + "</li>"
                for c in self.card.claims
            )
            + "</ul></details></section>"
        )
        page.toc.append((self.anchor, self.title))
