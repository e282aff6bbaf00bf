"""A study from outside the package, as a user's own package would write one (tests/test_outside_study.py).

It reads identify's key heads, counts the layers they sit in, writes ``spread/spread.json``, adds a section with
a figure and a table to the report, and a claim (X1: the key heads span at most ``spread.max_layers`` layers) to
the card. Nothing in mathcircuits names it: it joins through ``register_study`` or the entry-point group.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass

import plotly.graph_objects as go

from mathcircuits.claims import Claim, Verdict
from mathcircuits.patching import KeyComponents
from mathcircuits.pipeline import Context, Contribution, ResultReader, StageSummary, Study, StudyCode, setting
from mathcircuits.report.html import Page
from mathcircuits.report.sections import NamedFigure, Section
from mathcircuits.stats import Interval


@dataclass(frozen=True)
class SpreadConfig:
    """The spread study's settings."""

    enabled: bool = setting(True, "run the spread study")
    max_layers: int = setting(2, "the most layers the key heads may span for X1 to hold", ge=1)


@dataclass(frozen=True)
class SpreadSummary(StageSummary):
    """How many key heads sit in each layer."""

    per_layer: dict[str, int]


def run(ctx: Context) -> SpreadSummary:
    key = KeyComponents.load(ctx.paths.key_components)
    per_layer = {str(layer): n for layer, n in sorted(Counter(h.layer for h in key.heads).items())}
    out = ctx.paths.stage("spread") / "spread.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"per_layer": per_layer}, indent=2) + "\n")
    return SpreadSummary(per_layer=per_layer)


@dataclass(frozen=True)
class SpreadSection(Section):
    """The key heads per layer, as bars and a table."""

    per_layer: dict[str, int]
    anchor = "spread"
    title = "Layers of the key heads (spread)"

    def figures(self) -> tuple[NamedFigure, ...]:
        bars = go.Figure(go.Bar(x=list(self.per_layer), y=list(self.per_layer.values())))
        return (NamedFigure("spread", bars),)

    def render(self, page: Page, figures: tuple[NamedFigure, ...]) -> None:
        self.start(page)
        page.reading(f"The key heads sit in {len(self.per_layer)} layers.")
        for f in figures:
            page.figure(f.figure)


def _claim(measurement: str, estimate: Interval, verdict: Verdict, reason: str) -> Claim:
    return Claim(
        id="X1",
        title="key heads span few layers",
        statement="the key heads sit in few layers",
        paper="not in the paper",
        measurement=measurement,
        estimate=estimate,
        unit="layers",
        verdict=verdict,
        reason=reason,
    )


def report(r: ResultReader) -> Contribution:
    f = r.ctx.paths.stage("spread") / "spread.json"
    limit = r.ctx.config.section("spread").max_layers
    if not f.is_file():
        why = "stage spread off"
        nothing = Interval(math.nan, math.nan, math.nan, 0, method="none")
        return Contribution(claims=(_claim(why, nothing, Verdict.NOT_MEASURED, why),))
    per_layer = json.loads(f.read_text())["per_layer"]
    n = len(per_layer)
    verdict = Verdict.HOLDS if n <= limit else Verdict.FAILS
    counted = Interval(float(n), float(n), float(n), sum(per_layer.values()), method="none")
    claim = _claim(f"{n} layers (at most {limit})", counted, verdict, f"{n} layers against at most {limit}")
    return Contribution(sections=(SpreadSection(per_layer),), claims=(claim,))


def _code() -> StudyCode:
    return StudyCode(run=run, summary=SpreadSummary, report=report)


STUDY = Study(
    "spread",
    "count the layers the key heads sit in",
    settings=("spread",),
    reads=("identify",),
    code=_code,
    switch="spread",
    config={"spread": SpreadConfig},
)
