"""The last stage, ``report``: the claims card, every figure (HTML + static formats) and one offline HTML report.

A loop over the registry: every study reads its own saved results back (:class:`~mathcircuits.pipeline.study.
Contribution`: the report parts it fills, sections of its own, its claims), whether or not it ran, so a study
that was off (or a file from an older version) leaves its claims "not measured, because …" and its sections
out. Every table and figure is built from the saved results, never read back from a CSV file. Reads the
``analysis`` section (``static_formats``); writes ``report/claims.json`` (the
:class:`~mathcircuits.claims.ClaimsCard`), ``report/report.html`` and ``report/figures/``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

import pandas as pd

from mathcircuits.claims import CardSettings, ClaimsCard, Verdict
from mathcircuits.numbers import NumberResults
from mathcircuits.pipeline.context import Context, StageSummary
from mathcircuits.pipeline.facts import FactUse
from mathcircuits.pipeline.reader import ResultReader
from mathcircuits.pipeline.study import Contribution, Study, StudyCode, merge_claims
from mathcircuits.report import ReportParts, build_report
from mathcircuits.report.build import report_figures
from mathcircuits.viz import save_figures
from mathcircuits.viz.export import find_chromium

__all__: list[str] = []


@dataclass(frozen=True)
class ClaimLine:
    """One claim of the card, as the CLI prints it."""

    id: str
    title: str
    verdict: Verdict
    measurement: str


@dataclass(frozen=True)
class ReportSummary(StageSummary):
    """The claims card (first), where the report is and how many figures it holds."""

    report: str
    figures: int
    static_formats: list[str] = field(default_factory=list)
    claims: list[ClaimLine] = field(default_factory=list)

    def lines(self) -> list[str]:
        card = [
            f" {'+' if c.id.startswith('N') else ' '}{c.id} {c.title:<38}  {c.verdict:<32}  {c.measurement}"
            for c in self.claims
        ] or ["  claims: none (re-run report)"]
        head = (
            ["  claims (Zhang et al. 2024; + beyond the paper; 95% intervals; rules in docs/claims.md):"]
            if self.claims
            else []
        )
        return head + card + [f"  report: {self.report}", f"  figures: {self.figures}"]


def _facts_used(ctx: Context, studies: Mapping[str, Study]) -> dict[str, str]:
    """Per study that draws pairs: the facts it used and how many another study used or owns (0)."""
    out = {}
    for name, study in studies.items():
        if ctx.paths.marker(name).is_file():
            use = getattr(ctx.summary(name, study.summary), "facts", None)
            if isinstance(use, FactUse):
                out[name] = use.line().strip().removeprefix("facts (op, a, b) used: ")
    return out


def _unset(value: object, default: object) -> bool:
    if value is None or value is default:
        return True
    if isinstance(value, (Mapping, tuple, list, str)):
        return not value
    return isinstance(value, NumberResults) and value == NumberResults()


def _filled(parts: list[ReportParts]) -> dict[str, object]:
    """The fields the studies filled, each from the study that filled it (a field left at its default is unset)."""
    empty = ReportParts()
    found: dict[str, object] = {}
    for p in parts:
        for f in dataclasses.fields(ReportParts):
            value = getattr(p, f.name)
            if not _unset(value, getattr(empty, f.name)):
                found[f.name] = value
    return found


def costs(ctx: Context, studies: Mapping[str, Study]) -> pd.DataFrame:
    """What each finished study cost: wall time and peak memory, as its marker recorded them."""
    rows = []
    for name, study in studies.items():
        if ctx.paths.marker(name).is_file():
            s = ctx.summary(name, study.summary)
            rows.append({"study": name, "seconds": s.seconds, "peak memory": str(s.peak_memory or "not measured")})
    return pd.DataFrame(rows, columns=["study", "seconds", "peak memory"])


def run(ctx: Context, studies: Mapping[str, Study]) -> ReportSummary:
    """The claims card, every figure (HTML + static formats) and one offline HTML report, from ``studies``.

    The model is not loaded: its spec is read from the saved patching result.
    """
    paths = ctx.paths
    reader = ResultReader(ctx)
    made: list[Contribution] = []
    for study in studies.values():
        code = study.code()
        if code.report is not None:
            made.append(code.report(reader))
    found = _filled([c.parts for c in made if c.parts is not None])
    if isinstance(found.get("data_summary"), Mapping):
        found["data_summary"] = {**found["data_summary"], "facts_used_by_stage": _facts_used(ctx, studies)}
    u = ctx.uncertainty
    card = ClaimsCard(
        claims=merge_claims(made), confidence=u.confidence, seed=u.seed, settings=CardSettings(n_boot=u.n_boot)
    )
    card.save(paths.claims)
    parts = ReportParts(claims=card, costs=costs(ctx, studies), **found)  # type: ignore[arg-type]
    figures = report_figures(parts, extra=[s for c in made for s in c.sections])  # built once: saved and embedded
    saved = figures.saved()
    formats = list(ctx.config.analysis.static_formats)
    if formats and find_chromium() is None:
        formats = []
    save_figures({str(paths.figure(name)): fig for name, fig in saved.items()}, formats=["html", *formats])
    views = {name: write for c in made for name, write in c.views.items()}
    for name, write in views.items():
        write(paths.figure(name).with_suffix(".html"))
    report = build_report(paths.report, parts, figures)
    return ReportSummary(
        report=str(report),
        figures=len(saved) + len(views),
        static_formats=formats,
        claims=[ClaimLine(c.id, c.title, c.verdict, c.measurement) for c in card.claims],
    )


def code(studies: Mapping[str, Study]) -> StudyCode:
    """The report stage's code, reading ``studies`` (every study of the registry, in order)."""
    return StudyCode(run=partial(run, studies=studies), summary=ReportSummary)
