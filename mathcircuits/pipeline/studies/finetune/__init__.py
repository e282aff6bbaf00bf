"""Finetune: precise SFT of the key heads' Q/K/V/O slices (and MLPs) against full SFT (paper §4).

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
    from mathcircuits.pipeline.studies.finetune.results import CODE

    return CODE


STUDY = Study(
    "finetune",
    "precise SFT of the key heads (and MLPs) vs full SFT",
    settings=("finetune", "evaluation", "data"),
    reads=("identify",),
    code=_code,
    switch="finetune",
)
