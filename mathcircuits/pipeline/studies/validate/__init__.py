"""Validate.

Knockout of the key heads against depth-matched random heads, and transfer to other formats and operations (paper
§3.3-3.4); claims C2, C4, C5.

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
    from mathcircuits.pipeline.studies.validate.results import CODE

    return CODE


STUDY = Study(
    "validate",
    "mean-ablation knockout (key vs random heads) and transfer to other data",
    settings=("validation",),
    reads=("data", "identify"),
    code=_code,
)
