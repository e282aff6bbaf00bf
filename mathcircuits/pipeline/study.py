"""What a study is: one record in the registry, and what it hands the report and the claims card.

A study (data, identify, validate, …) is one folder of :mod:`mathcircuits.pipeline.studies`, or a user's own
package registered through :func:`~mathcircuits.pipeline.plugins.register_study` or the ``mathcircuits.studies``
entry-point group. Its :class:`Study` record names it, the studies it reads and the config sections in its
fingerprint; its code (:class:`StudyCode`, imported on first use so the CLI parses without torch) runs it,
rebuilds its summary, checks a run before anything is written, and reads its saved results back as a
:class:`Contribution`: the report parts it fills, its sections and its claims. The runner, ``status``, the
report and the card loop over the registry and never name a study.

Example (a study of one's own, see ``docs/howto/add-a-study.md``)::

    MY_STUDY = Study("mine", "what it measures", settings=("mine",), reads=("identify",),
                     config={"mine": MyConfig}, code=lambda: StudyCode(run=run, summary=MySummary, report=report))
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the record is read by the CLI before torch is imported; these name types only
    from pathlib import Path

    from mathcircuits.claims import Claim
    from mathcircuits.pipeline.config import RunConfig
    from mathcircuits.pipeline.context import Context, StageSummary
    from mathcircuits.pipeline.paths import RunPaths
    from mathcircuits.pipeline.reader import ResultReader
    from mathcircuits.report import ReportParts
    from mathcircuits.report.sections import Section

__all__ = [
    "Contribution",
    "Study",
    "StudyCode",
]


@dataclass(frozen=True)
class Contribution:
    """What one study hands the report: the :class:`~mathcircuits.report.ReportParts` it fills (the fields it leaves
    at their defaults are another study's), sections of its own (a study from outside the package), and its
    claims (those of another study's id replace them: the later study in the registry has the last word, e.g. the
    fair comparison's C6)."""

    parts: ReportParts | None = None
    sections: tuple[Section, ...] = ()
    claims: tuple[Claim, ...] = ()
    #: interactive views written beside the figures: file stem → a function that writes it to the path given
    views: Mapping[str, Callable[[Path], None]] = field(default_factory=dict)


@dataclass(frozen=True)
class StudyCode:
    """A study's code: how it runs, how its summary is rebuilt, what it reports and what it checks first.

    ``report`` reads the study's saved results through the shared reader (it runs whether or not the study ran,
    so its claims can say "not measured, because …"). ``check`` runs before the model is loaded (settings and
    folders), ``preflight`` once it is (e.g. the tokenizer), each for the stages about to run.
    """

    run: Callable[[Context], StageSummary]
    summary: type[StageSummary]
    report: Callable[[ResultReader], Contribution] | None = None
    check: Callable[[RunConfig, Sequence[str]], None] | None = None
    preflight: Callable[[Context, Sequence[str]], None] | None = None


@dataclass(frozen=True)
class Study:
    """One study of the registry.

    Args:
        name: the CLI sub-command and the run-folder sub-folder.
        help: one line for ``mathcircuits --help`` and the docs.
        settings: the config sections it reads (they enter its fingerprint, with the model section).
        reads: the studies whose outputs it reads (they run first).
        code: its :class:`StudyCode`, imported on first use.
        switch: the config section whose ``enabled: false`` turns it off (None: always on).
        config: config sections it adds to the run config (section name → config class): a study from outside
            the package declares its settings here; the built-in studies' sections are the run config's own.
        progress: how far a resumable study has come, in words, for ``status`` ("" when nothing to say).
    """

    name: str
    help: str
    settings: tuple[str, ...]
    reads: tuple[str, ...]
    code: Callable[[], StudyCode]
    switch: str | None = None
    config: Mapping[str, type] = field(default_factory=dict)
    progress: Callable[[RunPaths], str] | None = None

    @property
    def run(self) -> Callable[[Context], StageSummary]:
        """The study's function ``Context → summary`` (imports its code)."""
        return self.code().run

    @property
    def summary(self) -> type[StageSummary]:
        """The summary's type, rebuilt from the ``.done.json`` marker (imports its code)."""
        return self.code().summary


def claim_order(claim_id: str) -> tuple[int, str, int, str]:
    """The card's order of claim ids: the paper's (C…) first, then the others by letter; by number, then suffix."""
    m = re.fullmatch(r"([A-Za-z]+)(\d*)(.*)", claim_id)
    letters, number, rest = m.groups() if m else (claim_id, "", "")
    return (0 if letters == "C" else 1, letters, int(number) if number else 0, rest)


def merge_claims(contributions: Sequence[Contribution]) -> tuple[Claim, ...]:
    """Every study's claims in card order; of two with the same id, the later study's."""
    by_id: dict[str, Claim] = {}
    for c in contributions:
        for claim in c.claims:
            by_id[claim.id] = claim
    return tuple(sorted(by_id.values(), key=lambda c: claim_order(c.id)))
