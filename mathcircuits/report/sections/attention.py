"""Where the key heads attend from the last position, by token role (analyze)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mathcircuits._errors import FixableValueError
from mathcircuits.analysis import AttentionByRole
from mathcircuits.claims.attention import HEAD_KIND, role_findings
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.report.html import Page, table
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.readings import reading_attention
from mathcircuits.report.sections.base import NamedFigure, Section
from mathcircuits.viz import attention_excess, attention_role_distributions, attention_role_means

__all__: list[str] = []


@dataclass(frozen=True)
class AttentionSection(Section):
    """Attention above the uniform share, its distribution per role, and the role means per head.

    ``head_classes`` are the key heads' classes as claim C3 draws them (:func:`c3_classes`); the role panels use
    them, so a head the card calls an operand head is not drawn among operator heads.
    """

    attention: AttentionByRole
    head_classes: Mapping[str, str] | None = None
    anchor = "attention"
    title = "Attention of key heads by token role (analyze)"

    @classmethod
    def of(cls, parts: ReportParts) -> tuple[Section, ...]:
        if parts.attention is None:
            return ()
        layers = parts.attention_layers or parts.attention
        return (cls(parts.attention, c3_classes(layers, parts.key_components, parts.top_source)),)

    def figures(self) -> tuple[NamedFigure, ...]:
        roles = attention_role_distributions(self.attention, head_classes=self.head_classes)
        return (
            NamedFigure("attention_excess", attention_excess(self.attention)),
            NamedFigure("attention_roles", roles),
            NamedFigure("attention_means", attention_role_means(self.attention), saved=False),
        )

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        self.start(page)
        page.reading(reading_attention(self.attention))
        for f in figures:
            page.figure(f.figure)
        page.table("Attention per head and operation", table(self.attention.summary()))


def c3_classes(
    attention: AttentionByRole, key: KeyComponents | None, patching: PatchingResult | None
) -> dict[str, str] | None:
    """Each key head's class (``"operand"``/``"operator"``) by claim C3's rule, on the pairs the card reads.

    The identification pairs (``patching``'s) are left out as the card leaves them out. None when C3 cannot class
    them (no key heads, a head or its layer-mates unmeasured, no sink measured, every pair chose the heads): the
    figure then classes heads per operation.
    """
    if key is None or not key.heads:
        return None
    chose = patching.pair_ids if patching is not None and patching.pair_ids else None
    try:
        test = role_findings(attention, key, chose)
    except FixableValueError:
        return None
    if test.n_classing == 0:
        return None
    return {str(h): HEAD_KIND[f.role] for f in test.findings for h in f.heads}
