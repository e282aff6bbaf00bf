"""Identify: path patching from every head and MLP to the logits; the key components (paper §3.2); claim C1.

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
    from mathcircuits.pipeline.studies.identify.results import CODE

    return CODE


STUDY = Study(
    "identify",
    "path-patch every head and MLP to the logits; select key components (key_components.json)",
    settings=("patching", "selection"),
    reads=("data",),
    code=_code,
)
