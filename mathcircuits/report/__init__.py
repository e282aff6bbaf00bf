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
from mathcircuits.report.build import ReportFigures, build_report
from mathcircuits.report.html import Page
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.sections import NamedFigure, Section

__all__ = [
    "NamedFigure",
    "Page",
    "ReportFigures",
    "ReportParts",
    "Section",
    "build_report",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
