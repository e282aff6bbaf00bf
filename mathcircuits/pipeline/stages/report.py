"""Stage ``report``: the claims card, every figure (HTML + static formats) and one offline HTML report; runs last.

Reads the ``analysis`` section (``static_formats``); writes ``report/claims.json`` (the
:class:`~mathcircuits.claims.ClaimsCard`), ``report/report.html`` and ``report/figures/``.
Every result is optional: a stage that was off (or a file from an older version) leaves its
claim "not measured" and its section out. The circuit gets a section when the circuit stage
wrote one; the fine-tuning table when the evaluate stage wrote one; the fair comparison (C6 from it, C6b
beside it, the table and the Pareto figure) when the compare stage wrote one. C6 names what "precise"
tuned (heads only; the non-key heads changed through shared K/V).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from mathcircuits._io import ResultFileError, read_json
from mathcircuits.ablation import KnockoutResult, TransferResult
from mathcircuits.analysis import AttentionByRole, HeadPatterns, MLPProbeResult
from mathcircuits.circuit import Circuit, Faithfulness
from mathcircuits.claims import assess_claims
from mathcircuits.claims.improve import precise_definition, with_unit_claims
from mathcircuits.evaluation import EvalResult
from mathcircuits.finetune import SFTResult, SliceSet, UnitComparison, kv_shared_heads
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.pipeline.context import Context, StageSummary
from mathcircuits.pipeline.stages.data import DataSummary
from mathcircuits.pipeline.stages.identify import IdentifySummary
from mathcircuits.viz import (
    attention_excess,
    attention_heads_view,
    attention_role_distributions,
    build_report,
    find_chromium,
    knockout_curves,
    patching_heatmaps,
    patching_top_heads,
    probe_case_trajectory,
    probe_similarity_curves,
    save_figures,
    selection_stability_bars,
    transfer_bars,
)

__all__ = ["ReportSummary", "run"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReportSummary(StageSummary):
    """The claims card (first), where the report is and how many figures it holds."""

    report: str
    figures: int
    static_formats: list[str] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)

    def lines(self) -> list[str]:
        card = [f"  {c['id']} {c['title']:<38}  {c['verdict']:<32}  {c['measurement']}" for c in self.claims] or [
            "  claims: none (re-run report)"
        ]
        head = ["  claims (Zhang et al. 2024; 95% intervals; rules in docs/claims.md):"] if self.claims else []
        return head + card + [f"  report: {self.report}", f"  figures: {self.figures}"]


def _load(cls: type, path: Path, stage: str, off: dict[str, str], name: str) -> Any:
    """The saved result, or None (recording why in ``off``) when its stage did not write it or wrote an old file."""
    if not path.exists():
        off.setdefault(name, stage)
        return None
    try:
        return cls.load(path)
    except ResultFileError as err:
        log.warning("%s", err)
        off[name] = f"{stage}: its file is from an older version, re-run `mathcircuits {stage} --force`"
        return None


def run(ctx: Context) -> ReportSummary:
    """The claims card, every figure (HTML + static formats) and one offline HTML report.

    Args:
        ctx: the run context.

    Returns:
        The stage summary, whose first lines are the claims card.
    """
    paths = ctx.paths
    ops = ctx.summary("identify", IdentifySummary).patched_operations
    off: dict[str, str] = {}
    key = _load(KeyComponents, paths.key_components, "identify", off, "key")
    per_op = {op: PatchingResult.load(paths.patching(op)) for op in ops}
    overall = PatchingResult.load(paths.patching("all"))
    knock = {op: r for op in ops if (r := _load(KnockoutResult, paths.knockout(op), "validate", off, "knockout"))}
    tr = _load(TransferResult, paths.transfer(), "validate", off, "transfer")
    att = _load(AttentionByRole, paths.attention(), "analyze", off, "attention")
    probes = _load(MLPProbeResult, paths.probes(), "analyze", off, "probes")
    patterns = _load(HeadPatterns, paths.patterns, "analyze", off, "patterns")
    evals = {m: r for m in ("base", "precise", "full") if (r := _load(EvalResult, paths.eval_result(m), "", {}, ""))}
    sft = _load(SFTResult, paths.sft_result("precise"), "", {}, "") if evals else None
    precise = ""
    if sft is not None and sft.slices:
        sl = SliceSet.from_dict(sft.slices)
        precise = precise_definition(len(sl.heads), len(kv_shared_heads(sl)), sft.n_trainable)
        if sl.mlps:
            precise += f" + the key MLPs {list(sl.mlps)} (that is precise+mlp)"
    # the compare stage's units, when it ran, are the fair test of C6 (each mode at its chosen rate, several seeds)
    cmp = _load(UnitComparison, paths.comparison, "", {}, "")
    if not evals and paths.marker("evaluate").exists():  # the stage ran, but wrote no model's results
        e, f = ctx.config.evaluation, ctx.config.finetune
        off["evals"] = (
            "stage evaluate off: evaluation.enabled is false"
            if not e.enabled
            else "no model evaluated: finetune off or no fine-tuned model, and no benchmark folder found"
            if not f.enabled
            else "no evaluation results written: re-run evaluate"
        )
    circuits = {op: c for op in ops if (c := _load(Circuit, paths.circuit(op), "circuit", {}, "circuit"))}
    faiths = {op: f for op in circuits if (f := _load(Faithfulness, paths.circuit_faithfulness(op), "", {}, ""))}
    card = assess_claims(
        key=key,
        knockout=knock or None,
        transfer=tr,
        attention=att,
        probes=probes,
        evals=evals or None,
        off=off,
        precise=precise,
        seed=ctx.config.data.seed,
    )
    if cmp is not None:
        card = with_unit_claims(card, cmp)
    card.save(paths.claims)
    figs: dict[str, Any] = {}
    for label, fig in patching_heatmaps(per_op, key, overall=overall).items():
        figs[str(paths.figure(f"patching_{label}"))] = fig
    figs[str(paths.figure("patching_top_heads"))] = patching_top_heads(overall, key=key)
    if key is not None and key.has_stability:
        figs[str(paths.figure("selection_stability"))] = selection_stability_bars(key)
    if knock:
        figs[str(paths.figure("knockout"))] = knockout_curves(list(knock.values()))
    if tr is not None and tr.rows:
        figs[str(paths.figure("transfer"))] = transfer_bars(tr)
    if att is not None:
        figs[str(paths.figure("attention_roles"))] = attention_role_distributions(att)
        figs[str(paths.figure("attention_excess"))] = attention_excess(att)
    if probes is not None:
        figs[str(paths.figure("mlp_probe_curves"))] = probe_similarity_curves(probes)
        figs[str(paths.figure("mlp_probe_case"))] = probe_case_trajectory(probes)
    formats = list(ctx.config.analysis.static_formats)
    if formats and find_chromium() is None:
        formats = []
    save_figures(figs, formats=["html", *formats])
    if patterns is not None:
        attention_heads_view(patterns).save(paths.figure("key_heads_attention").with_suffix(".html"))
    report = build_report(
        paths.report,
        title=f"mathcircuits run: {ctx.config.model.source}",
        claims=card,
        model_spec=ctx.model.spec,
        data_summary=ctx.summary("data", DataSummary).to_dict(),
        accuracy_table=pd.read_csv(paths.accuracy_csv),
        patching=per_op,
        patching_overall=overall,
        key_components=key,
        knockout=knock or None,
        transfer=tr,
        attention=att,
        probes=probes,
        patterns=patterns,
        evaluation=pd.read_csv(paths.eval_table) if paths.eval_table.exists() else None,
        circuit=circuits or None,
        circuit_faithfulness=faiths or None,
        comparison_sweep=pd.read_csv(paths.compare_sweep) if paths.compare_sweep.exists() else None,
        comparison_table=(pd.read_csv(paths.compare_table, index_col=0) if paths.compare_table.exists() else None),
        comparison_points=pd.read_csv(paths.compare_points) if paths.compare_points.exists() else None,
        comparison_power=read_json(paths.compare_power)["statement"] if paths.compare_power.exists() else "",
    )
    return ReportSummary(
        report=str(report),
        figures=len(figs) + (patterns is not None),
        static_formats=formats,
        claims=[
            {"id": c.id, "title": c.title, "verdict": c.verdict, "measurement": c.measurement} for c in card.claims
        ],
    )
