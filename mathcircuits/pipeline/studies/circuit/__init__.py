"""Circuit: each operation's circuit by exact sender → receiver path patching, and its faithfulness curve.

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
    from mathcircuits.pipeline.studies.circuit.results import CODE

    return CODE


STUDY = Study(
    "circuit",
    "each operation's circuit (sender → receiver path patching to saturation) and its faithfulness curve",
    settings=("circuit", "data"),
    reads=("data",),
    code=_code,
    switch="circuit",
)
