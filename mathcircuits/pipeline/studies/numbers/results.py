"""What the numbers study hands the report: its results and claims N1–N3 (beyond the paper)."""

from __future__ import annotations

from mathcircuits.claims import claim_n1, claim_n2, claim_n3
from mathcircuits.numbers import HelixPatchResult, HelixResult, NeuronResult, NumberResults, ProbeResult, Spectrum
from mathcircuits.pipeline.reader import ResultReader
from mathcircuits.pipeline.studies.numbers.stage import NumbersSummary, run
from mathcircuits.pipeline.study import Contribution, StudyCode
from mathcircuits.report import ReportParts

__all__: list[str] = []


def _off(r: ResultReader) -> dict[str, str]:
    """Why a number claim is not measured: the stage was off, or it skipped a part the model cannot pass."""
    ctx = r.ctx
    if not ctx.paths.marker("numbers").exists():
        return {}
    summary = ctx.summary("numbers", NumbersSummary)
    if summary.disabled:
        return {n: "stage numbers off: numbers.enabled is false" for n in ("N1", "N2", "N3")}
    out = {}
    for part, claim in (("helix patch", "N2"), ("neurons", "N3")):
        if part in summary.skipped:
            out[claim] = summary.skipped[part].problem
    return out


def report(r: ResultReader) -> Contribution:
    """The spectra, probes, helix, its patch and the neurons (each None when off or skipped); N1–N3."""
    p = r.ctx.paths.numbers
    nums = NumberResults(
        spectra=r.load(Spectrum, p("spectra"), "numbers"),
        logit_spectra=r.load(Spectrum, p("logit_spectra"), "numbers"),
        probes=r.load(ProbeResult, p("probes"), "numbers"),
        helix=r.load(HelixResult, p("helix"), "numbers"),
        helix_patch=r.load(HelixPatchResult, p("helix_patch"), "numbers"),
        neurons=r.load(NeuronResult, p("neurons"), "numbers"),
    )
    off = _off(r)
    claims = (
        claim_n1(nums.spectra, nums.probes, off.get("N1", "stage numbers off")),
        claim_n2(nums.helix, nums.helix_patch, off.get("N2", "stage numbers off")),
        claim_n3(nums.neurons, off.get("N3", "stage numbers off")),
    )
    return Contribution(parts=ReportParts(numbers=nums), claims=claims)


CODE = StudyCode(run=run, summary=NumbersSummary, report=report)
