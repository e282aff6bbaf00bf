"""Numbers.

How numbers are represented (Fourier spectra, mod-T probes, helix, heuristic neurons); claims N1-N3, beyond the
paper.

The folder holds the study: ``stage.py`` (how it runs, its summary), ``results.py`` (what it hands the report and
the claims card) and this record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mathcircuits.pipeline.study import Study

if TYPE_CHECKING:
    from mathcircuits.pipeline.study import StudyCode

__all__: list[str] = []


def _code() -> StudyCode:
    from mathcircuits.pipeline.studies.numbers.results import CODE

    return CODE


STUDY = Study(
    "numbers",
    "how numbers are represented: Fourier spectra, mod-T probes, helix and its patch, heuristic neurons",
    settings=("numbers",),
    reads=("identify",),
    code=_code,
    switch="numbers",
)
