"""Evaluate: the base and fine-tuned models on held-out arithmetic and generic benchmarks; claim C6.

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
    from mathcircuits.pipeline.studies.evaluate.results import CODE

    return CODE


STUDY = Study(
    "evaluate",
    "accuracy of base / precise / full models on held-out arithmetic and benchmarks",
    settings=("evaluation",),
    reads=("finetune",),
    code=_code,
    switch="evaluation",
)
