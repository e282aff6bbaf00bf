"""The report's section on how numbers are represented (the numbers stage; claims N1–N3, beyond the paper).

:func:`numbers_section` adds the reading (:func:`~mathcircuits.report.readings.reading_numbers`), the
figures and the tables of a :class:`~mathcircuits.numbers.NumberResults` to the page. The figures are
built once by :func:`~mathcircuits.report.parts.report_figures` (``numbers_*``, from
:func:`mathcircuits.viz.numbers_figures`), never here.
"""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from mathcircuits.numbers import NumberResults
from mathcircuits.report.html import Page, table
from mathcircuits.report.readings import reading_numbers

__all__ = ["numbers_section"]


def numbers_section(page: Page, numbers: NumberResults, figs: Mapping[str, go.Figure]) -> None:
    """How numbers are represented: the reading, every ``numbers_*`` figure, then the neuron, helix and patch tables."""
    page.section("numbers", "How numbers are represented and combined (numbers; beyond the paper)")
    page.reading(reading_numbers(numbers))
    for name in [n for n in figs if n.startswith("numbers_")]:
        page.figure(figs[name])
    if numbers.neurons is not None:
        page.table("Heuristic neuron types per layer (top-k)", table(numbers.neurons.type_table()))
    if numbers.helix is not None:
        page.table("Helix vs PCA per depth", table(numbers.helix.to_dataframe()))
    if numbers.helix_patch is not None:
        page.table("Helix patch", table(numbers.helix_patch.to_dataframe()))
