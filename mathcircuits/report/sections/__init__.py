"""The report's sections, one module each, in the order of the page.

Each section (:class:`Section`) holds the typed results it shows, builds its own figures and renders
its heading, reading, figures and appendix tables. :data:`SECTIONS` is the page order: the claims card,
path patching, key heads, knockout, transfer, attention, MLP probes, circuits (one per operation), how
numbers are represented, fine-tuning and evaluation, the fair SFT comparison, interactive views, extra figures.
"""

from __future__ import annotations

from mathcircuits.report.sections.attention import AttentionSection
from mathcircuits.report.sections.base import NamedFigure, Section
from mathcircuits.report.sections.circuit import CircuitSection
from mathcircuits.report.sections.claims import ClaimsSection
from mathcircuits.report.sections.compare import CompareSection
from mathcircuits.report.sections.evaluation import EvaluationSection
from mathcircuits.report.sections.extra import ExtraSection
from mathcircuits.report.sections.key import KeySection
from mathcircuits.report.sections.knockout import KnockoutSection
from mathcircuits.report.sections.numbers import NumbersSection
from mathcircuits.report.sections.patching import PatchingSection
from mathcircuits.report.sections.probes import ProbesSection
from mathcircuits.report.sections.transfer import TransferSection
from mathcircuits.report.sections.views import ViewsSection

__all__ = [
    "NamedFigure",
    "Section",
]

#: Every kind of section, in page order (each makes zero or more sections of a report's parts).
SECTIONS: tuple[type[Section], ...] = (
    ClaimsSection,
    PatchingSection,
    KeySection,
    KnockoutSection,
    TransferSection,
    AttentionSection,
    ProbesSection,
    CircuitSection,
    NumbersSection,
    EvaluationSection,
    CompareSection,
    ViewsSection,
    ExtraSection,
)
