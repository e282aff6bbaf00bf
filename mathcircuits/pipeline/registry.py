"""The one registry of studies: the built-in folders, then the studies registered from outside, then the report.

The runner, ``status``, the CLI's sub-commands, the report and the claims card all read :func:`stages`; none of
them names a study. The report is the last entry: it reads every study (its record is built here, so a study
registered from outside is read like a built-in one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mathcircuits.pipeline.plugins import StudyError, registered
from mathcircuits.pipeline.studies import BUILTIN
from mathcircuits.pipeline.study import Study

if TYPE_CHECKING:
    from mathcircuits.pipeline.study import StudyCode

__all__ = [
    "all_studies",
    "stages",
]

#: the name of the last stage, which reads every study and writes the report and the claims card
REPORT = "report"


def _report_code(every: dict[str, Study]) -> StudyCode:
    from mathcircuits.pipeline.report import code

    return code(every)


def all_studies() -> dict[str, Study]:
    """Every study, built-in first, then those registered from outside, in the order registered."""
    out = {s.name: s for s in BUILTIN}
    for s in registered():
        if s.name in out or s.name == REPORT:
            raise StudyError(f"a study from outside is named {s.name!r}, like a built-in stage. ", "rename it.")
        if not isinstance(s, Study):
            raise StudyError(f"the study {s.name!r} is a {type(s).__name__}. ", "make it a mathcircuits Study.")
        if bad := [r for r in s.reads if r not in out]:
            raise StudyError(
                f"study {s.name!r} reads {bad}, which no study before it is named. ",
                f"read some of {list(out)} (or register the study it reads first).",
            )
        out[s.name] = s
    return out


def stages() -> dict[str, Study]:
    """Every stage in run order: the studies, then the report, which reads them all.

    The report's fingerprint covers the ``analysis`` section (its static formats) and every section a study reads,
    since each study reads its own results back for the report under its own settings.
    """
    every = all_studies()
    report = Study(
        REPORT,
        "the claims card, figures (HTML + static) and one offline HTML report",
        settings=tuple(dict.fromkeys(("analysis", *(x for s in every.values() for x in s.settings)))),
        reads=tuple(every),
        code=lambda: _report_code(every),
    )
    return every | {REPORT: report}
