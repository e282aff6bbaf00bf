"""Analyze: what the key heads attend to, and what the MLPs write along the unembedding (paper §3.5); claim C3.

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
    from mathcircuits.pipeline.studies.analyze.results import CODE

    return CODE


STUDY = Study(
    "analyze",
    "attention of key heads by token role; MLP unembedding probes",
    settings=("analysis",),
    reads=("data", "identify"),
    code=_code,
)
