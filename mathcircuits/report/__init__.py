"""The report of a run: one offline HTML page, above the claims card it shows first.

* :mod:`.parts` — :class:`ReportParts` (the results a report shows);
* :mod:`.readings` — the paragraph above each stage's figure, written from the result values;
* :mod:`.sections` — one module per section (:class:`Section`: anchor, title, ``figures()``, ``render()``),
  each building its own figures from typed results, in page order (:data:`.sections.SECTIONS`);
* :mod:`.html` — the page builder, its style, values as readable text and tables;
* :mod:`.build` — :func:`report_figures` (every section with its figures, built once), :func:`report_html`
  and :func:`build_report`.
"""

from mathcircuits._checks import check_exports
from mathcircuits.report.build import ReportFigures, build_report, render_sections, report_figures, report_html
from mathcircuits.report.html import CARD_END_COLOUR, Page, accuracy_with_intervals, claims_table, kv_table, plain_text
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.readings import (
    reading_attention,
    reading_knockout,
    reading_numbers,
    reading_patching,
    reading_probes,
    reading_stability,
    reading_transfer,
    reading_unmeasurable,
)
from mathcircuits.report.sections import VERDICT_CLASS, NamedFigure, Section, numbers_section

__all__ = [
    "CARD_END_COLOUR",
    "VERDICT_CLASS",
    "NamedFigure",
    "Page",
    "ReportFigures",
    "ReportParts",
    "Section",
    "accuracy_with_intervals",
    "build_report",
    "claims_table",
    "kv_table",
    "numbers_section",
    "plain_text",
    "reading_attention",
    "reading_knockout",
    "reading_numbers",
    "reading_patching",
    "reading_probes",
    "reading_stability",
    "reading_transfer",
    "reading_unmeasurable",
    "render_sections",
    "report_figures",
    "report_html",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
