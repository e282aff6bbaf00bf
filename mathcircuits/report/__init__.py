"""The report of a run: one offline HTML page, above the claims card it shows first.

* :mod:`.parts` — :class:`ReportParts` (the results a report shows) and :func:`report_figures`
  (every figure of them, built once);
* :mod:`.readings` — the paragraph above each figure, written from the result values;
* :mod:`.sections` — one renderer per section, typed results in;
* :mod:`.numbers` — the section of the numbers stage's results (:class:`~mathcircuits.numbers.NumberResults`);
* :mod:`.html` — the page builder, its style, values as readable text and tables;
* :mod:`.build` — :func:`report_html` and :func:`build_report`.
"""

from mathcircuits.report.build import build_report, report_html
from mathcircuits.report.html import CARD_END_COLOUR, Page, accuracy_with_intervals, claims_table, kv_table, plain_text
from mathcircuits.report.numbers import numbers_section
from mathcircuits.report.parts import ReportParts, report_figures
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
from mathcircuits.report.sections import VERDICT_CLASS, render_sections

__all__ = [
    "CARD_END_COLOUR",
    "VERDICT_CLASS",
    "Page",
    "ReportParts",
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
