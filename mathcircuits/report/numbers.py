"""The report's section on how numbers are represented (the numbers stage; claims N1–N3, beyond the paper).

:class:`NumberResults` holds the numbers stage's saved results (each optional);
:func:`numbers_section` adds their reading, figures and tables to the page. The figures are
built once by :func:`~mathcircuits.report.parts.report_figures` (``numbers_*``, from
:func:`mathcircuits.viz.numbers_figures`), never here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import plotly.graph_objects as go

from mathcircuits.numbers import HelixPatchResult, HelixResult, NeuronResult, ProbeResult, Spectrum
from mathcircuits.report.html import Page, table
from mathcircuits.viz import reading_numbers

__all__ = ["NumberResults", "numbers_section"]


@dataclass(frozen=True)
class NumberResults:
    """The numbers stage's results a report shows; every one is optional.

    Args:
        spectra: the spectrum of the number states (rows: depths).
        logit_spectra: the spectra of the key components' direct effects on the candidate answers.
        probes: the mod-T and circular digit probes.
        helix: the helix fit against PCA and random subspaces.
        helix_patch: the helix subspace patch against PCA, random subspaces and the full patch.
        neurons: the heuristic neurons (types, sufficient top-k, associated-vs-random knockout).
    """

    spectra: Spectrum | None = None
    logit_spectra: Spectrum | None = None
    probes: ProbeResult | None = None
    helix: HelixResult | None = None
    helix_patch: HelixPatchResult | None = None
    neurons: NeuronResult | None = None

    def as_dict(self) -> dict[str, Spectrum | ProbeResult | HelixResult | HelixPatchResult | NeuronResult]:
        """The results present, by name (the form :func:`mathcircuits.viz.numbers_figures` takes)."""
        names = ("spectra", "logit_spectra", "probes", "helix", "helix_patch", "neurons")
        return {n: v for n in names if (v := getattr(self, n)) is not None}

    def __bool__(self) -> bool:
        return bool(self.as_dict())


def numbers_section(page: Page, numbers: NumberResults, figs: Mapping[str, go.Figure]) -> None:
    """How numbers are represented: the reading, every ``numbers_*`` figure, then the neuron, helix and patch tables."""
    page.section("numbers", "How numbers are represented and combined (numbers; beyond the paper)")
    page.reading(reading_numbers(numbers.as_dict()))
    for name in [n for n in figs if n.startswith("numbers_")]:
        page.figure(figs[name])
    if numbers.neurons is not None:
        page.table("Heuristic neuron types per layer (top-k)", table(numbers.neurons.type_table()))
    if numbers.helix is not None:
        page.table("Helix vs PCA per depth", table(numbers.helix.to_dataframe()))
    if numbers.helix_patch is not None:
        page.table("Helix patch", table(numbers.helix_patch.to_dataframe()))
