"""Stage ``report``: the claims card, every figure (HTML + static formats) and one offline HTML report; runs last.

Reads the ``analysis`` section (``static_formats``); writes ``report/claims.json`` (the
:class:`~mathcircuits.claims.ClaimsCard`), ``report/report.html`` and ``report/figures/``.
Every result is optional: a stage that was off (or a file from an older version) leaves its
claim "not measured" and its section out. The circuit gets a section when the circuit stage
wrote one; the numbers stage (claims N1–N3, beyond the paper) when it ran; the fine-tuning table when
the evaluate stage wrote one; the fair comparison (C6 from it, C6b beside it, the table and the Pareto
figure) when the compare stage wrote one. Every table and figure is built from the saved results (the scored
pairs, the ``EvalResult`` and ``SFTResult`` files, the ``UnitComparison``), never read back from a CSV file.
C6 names what "precise" tuned (heads only; the non-key heads changed through shared K/V).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from mathcircuits._files import read_json
from mathcircuits._io import ResultFileError, SavedResult
from mathcircuits.ablation import KnockoutResult, MLPMargin, RandomControl, TransferResult
from mathcircuits.analysis import AttentionByRole, HeadPatterns, MLPProbeResult
from mathcircuits.circuit import Circuit, Faithfulness
from mathcircuits.claims import Verdict, assess_claims
from mathcircuits.claims.improve import precise_definition, with_unit_claims
from mathcircuits.claims.numbers import with_number_claims
from mathcircuits.data import accuracy_table
from mathcircuits.evaluation import EvalResult
from mathcircuits.finetune import SFTResult, UnitComparison, effects_table
from mathcircuits.finetune.effects import pareto_points, sweep_table
from mathcircuits.finetune.matched import kv_shared_heads
from mathcircuits.numbers import HelixPatchResult, HelixResult, NeuronResult, NumberResults, ProbeResult, Spectrum
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.pipeline.context import Context, StageSummary
from mathcircuits.pipeline.facts import FACT_STAGES, FactUse
from mathcircuits.pipeline.stages import STAGES
from mathcircuits.pipeline.stages.data import DataSummary
from mathcircuits.pipeline.stages.evaluate import EvaluateSummary, evaluated_labels, evaluation_table
from mathcircuits.pipeline.stages.identify import IdentifySummary
from mathcircuits.pipeline.stages.numbers import NumbersSummary
from mathcircuits.report import ReportParts, build_report
from mathcircuits.report.build import report_figures
from mathcircuits.stats import DeltaTable, Uncertainty
from mathcircuits.viz import attention_heads_view, save_figures
from mathcircuits.viz.export import find_chromium

__all__: list[str] = []

log = logging.getLogger(__name__)

R = TypeVar("R", bound=SavedResult)


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


class _Loader:
    """Saved results of the run folder; a missing or outdated one is None, and the claims card is told why."""

    def __init__(self) -> None:
        self.off: dict[str, str] = {}  # claim input → the stage that did not write it
        self.reasons: dict[str, str] = {}  # claim input → another reason it is missing

    def load(self, cls: type[R], path: Path, stage: str = "", name: str = "") -> R | None:
        if not path.exists():
            if name:
                self.off.setdefault(name, stage)
            return None
        try:
            return cls.load(path)
        except ResultFileError as err:
            log.warning("%s", err)
            if name:
                self.reasons[name] = (
                    f"{stage}: its file is from an older version, re-run `mathcircuits {stage} --force`"
                )
            return None


def _numbers_off(ctx: Context) -> dict[str, str]:
    """Why a number claim (N1–N3) is not measured: the stage was off, or it skipped a part the model cannot pass."""
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


def _numbers(got: _Loader, ctx: Context) -> NumberResults:
    """The numbers stage's saved results (each None when the stage was off or skipped it)."""
    p = ctx.paths.numbers
    return NumberResults(
        spectra=got.load(Spectrum, p("spectra"), "numbers"),
        logit_spectra=got.load(Spectrum, p("logit_spectra"), "numbers"),
        probes=got.load(ProbeResult, p("probes"), "numbers"),
        helix=got.load(HelixResult, p("helix"), "numbers"),
        helix_patch=got.load(HelixPatchResult, p("helix_patch"), "numbers"),
        neurons=got.load(NeuronResult, p("neurons"), "numbers"),
    )


def _evaluation(got: _Loader, ctx: Context) -> DeltaTable | None:
    """The evaluate stage's table, rebuilt from the results it saved (None when the stage did not run or was off)."""
    if not ctx.paths.marker("evaluate").exists() or ctx.summary("evaluate", EvaluateSummary).skipped:
        return None
    labels = evaluated_labels(ctx)
    results = {m: r for m in labels if (r := got.load(EvalResult, ctx.paths.eval_result(m)))}
    return evaluation_table(ctx, results, labels)


def _facts_used(ctx: Context) -> dict[str, str]:
    """Per stage that draws pairs: the facts it used and how many another stage used or owns (issue #35: 0)."""
    out = {}
    for name in FACT_STAGES:
        if ctx.paths.marker(name).is_file():
            use = getattr(ctx.summary(name, STAGES[name].summary), "facts", None)
            if isinstance(use, FactUse):
                out[name] = use.line().strip().removeprefix("facts (op, a, b) used: ")
    return out


def run(ctx: Context) -> ReportSummary:
    """The claims card, every figure (HTML + static formats) and one offline HTML report.

    The model is not loaded: its spec is read from the saved patching result.

    Args:
        ctx: the run context.

    Returns:
        The stage summary, whose first lines are the claims card.
    """
    paths = ctx.paths
    ops = ctx.summary("identify", IdentifySummary).patched_operations
    got = _Loader()
    key = got.load(KeyComponents, paths.key_components, "identify", "key")
    per_op = {op: PatchingResult.load(paths.patching(op)) for op in ops}
    overall = PatchingResult.load(paths.patching("all"))
    knock = {op: r for op in ops if (r := got.load(KnockoutResult, paths.knockout(op), "validate", "knockout"))}
    tr = got.load(TransferResult, paths.transfer(), "validate", "transfer")
    att = got.load(AttentionByRole, paths.attention(), "analyze", "attention")
    probes = got.load(MLPProbeResult, paths.probes(), "analyze", "probes")
    control = got.load(RandomControl, paths.control(), "validate", "control")
    margin = got.load(MLPMargin, paths.mlp_margin, "validate", "margin")
    layer_att = got.load(AttentionByRole, paths.attention_layers(), "analyze", "attention")
    patterns = got.load(HeadPatterns, paths.patterns, "analyze", "patterns")
    evals = {m: r for m in ("base", "precise", "full") if (r := got.load(EvalResult, paths.eval_result(m)))}
    sft = got.load(SFTResult, paths.sft_result("precise")) if evals else None
    precise = ""
    if sft is not None and sft.slices is not None:
        sl = sft.slices
        precise = precise_definition(len(sl.heads), len(kv_shared_heads(sl)), sft.n_trainable)
        if sl.mlps:
            precise += f" + the key MLPs {list(sl.mlps)} (that is precise+mlp)"
    # the compare stage's units, when it ran, are the fair test of C6 (each mode at its chosen rate, several seeds)
    cmp = got.load(UnitComparison, paths.comparison)
    if not evals and paths.marker("evaluate").exists():  # the stage ran, but wrote no model's results
        e, f = ctx.config.evaluation, ctx.config.finetune
        got.reasons["evals"] = (
            "stage evaluate off: evaluation.enabled is false"
            if not e.enabled
            else "no model evaluated: finetune off or no fine-tuned model, and no benchmark folder found"
            if not f.enabled
            else "no evaluation results written: re-run evaluate"
        )
    circuits = {op: c for op in ops if (c := got.load(Circuit, paths.circuit(op), "circuit"))}
    faiths = {op: f for op in circuits if (f := got.load(Faithfulness, paths.circuit_faithfulness(op)))}
    card = assess_claims(
        patching=overall,
        key=key,
        control=control,
        transfer=tr,
        attention=layer_att,
        margin=margin,
        evals=evals or None,
        off=got.off,
        reasons=got.reasons,
        precise=precise,
        uncertainty=Uncertainty(seed=ctx.config.data.seed),
    )
    if cmp is not None:  # the paper's claims first (C6 from the units, C6b beside it), then N1–N3
        card = with_unit_claims(card, cmp)
    nums = _numbers(got, ctx)
    card = with_number_claims(
        card,
        spectra=nums.spectra,
        probes=nums.probes,
        helix=nums.helix,
        patch=nums.helix_patch,
        neurons=nums.neurons,
        off=_numbers_off(ctx),
    )
    card.save(paths.claims)
    parts = ReportParts(
        claims=card,
        model_spec=overall.model,
        data_summary=ctx.summary("data", DataSummary).to_dict() | {"facts_used_by_stage": _facts_used(ctx)},
        accuracy_table=accuracy_table(ctx.load_dataset(paths.pairs_scored)),
        patching=per_op,
        patching_overall=overall,
        key_components=key,
        knockout=knock,
        transfer=tr,
        attention=att,
        probes=probes,
        patterns=patterns,
        evaluation=_evaluation(got, ctx),
        circuit=circuits,
        circuit_faithfulness=faiths,
        comparison_sweep=sweep_table(cmp) if cmp is not None else None,
        comparison_table=effects_table(cmp) if cmp is not None else None,
        numbers=nums,
        comparison_points=pareto_points(cmp) if cmp is not None else None,
        comparison_power=read_json(paths.compare_power)["statement"] if paths.compare_power.exists() else "",
    )
    figures = report_figures(parts)  # built once: saved as files and embedded in the page
    saved = figures.saved()
    formats = list(ctx.config.analysis.static_formats)
    if formats and find_chromium() is None:
        formats = []
    save_figures({str(paths.figure(name)): fig for name, fig in saved.items()}, formats=["html", *formats])
    if patterns is not None:
        attention_heads_view(patterns).save(paths.figure("key_heads_attention").with_suffix(".html"))
    report = build_report(paths.report, parts, figures)
    return ReportSummary(
        report=str(report),
        figures=len(saved) + (patterns is not None),
        static_formats=formats,
        claims=[ClaimLine(c.id, c.title, c.verdict, c.measurement) for c in card.claims],
    )
