"""Compare.

Every fine-tuning mode at its own best learning rate, with intervals over items and seeds; claims C6 (the fair test)
and C6b.

The folder holds the study: ``stage.py`` (how it runs, its summary), ``results.py`` (what it hands the report and
the claims card) and this record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mathcircuits.pipeline.study import Study

if TYPE_CHECKING:
    from mathcircuits.pipeline.paths import RunPaths
    from mathcircuits.pipeline.study import StudyCode

__all__: list[str] = []


def _code() -> StudyCode:
    from mathcircuits.pipeline.studies.compare.results import CODE

    return CODE


def _progress(paths: RunPaths) -> str:
    """The comparison's units done so far (they resume one by one, so a stale or running study is partly done)."""
    from mathcircuits._files import read_json

    f = paths.compare_progress
    if not f.is_file():
        return ""
    p = read_json(f)
    return f"units: {p['done']} of {p['total']} done, {p['remaining']} remain"


STUDY = Study(
    "compare",
    "every fine-tuning mode at its own best learning rate (validation sweep), with intervals",
    settings=("compare", "finetune", "evaluation", "data"),
    reads=("identify",),
    code=_code,
    switch="compare",
    progress=_progress,
)
