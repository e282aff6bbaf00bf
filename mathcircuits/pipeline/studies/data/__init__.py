"""Data.

Template prompt pairs with token-aligned counterfactuals, kept to those the model answers correctly (paper §3.1).

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
    from mathcircuits.pipeline.studies.data.results import CODE

    return CODE


STUDY = Study(
    "data",
    "build reference/counterfactual pairs, score the model, keep correct pairs, write the accuracy table",
    settings=("model", "data"),
    reads=(),
    code=_code,
)
