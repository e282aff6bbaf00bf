"""Stage ``report``: every figure (HTML + static formats) and one offline HTML report; runs last.

Reads the ``analysis`` section (``static_formats``); writes ``report/report.html``
and ``report/figures/``. The fine-tuning table is included when the evaluate
stage wrote one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from mathcircuits.ablation import KnockoutResult
from mathcircuits.analysis import AttentionByRole, HeadPatterns, MLPProbeResult
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.pipeline.context import Context, StageSummary
from mathcircuits.pipeline.stages.data import DataSummary
from mathcircuits.pipeline.stages.identify import IdentifySummary
from mathcircuits.viz import (
    attention_heads_view,
    attention_role_distributions,
    build_report,
    find_chromium,
    knockout_curves,
    patching_heatmaps,
    probe_case_trajectory,
    probe_similarity_curves,
    save_figures,
)

__all__ = ["ReportSummary", "run"]


@dataclass(frozen=True)
class ReportSummary(StageSummary):
    """Where the report is and how many figures it holds."""

    report: str
    figures: int
    static_formats: list[str] = field(default_factory=list)


def run(ctx: Context) -> ReportSummary:
    """Every figure (HTML + static formats) and one offline HTML report.

    Args:
        ctx: the run context.

    Returns:
        The stage summary.
    """
    paths = ctx.paths
    ops = ctx.summary("identify", IdentifySummary).patched_operations
    key = KeyComponents.load(paths.key_components)
    per_op = {op: PatchingResult.load(paths.patching(op)) for op in ops}
    overall = PatchingResult.load(paths.patching("all"))
    knock = {op: KnockoutResult.load(paths.knockout(op)) for op in ops}
    att = AttentionByRole.load(paths.attention())
    probes = MLPProbeResult.load(paths.probes())
    patterns = HeadPatterns.load(paths.patterns)
    figs: dict[str, Any] = {}
    for label, fig in patching_heatmaps(per_op, key, overall=overall).items():
        figs[str(paths.figure(f"patching_{label}"))] = fig
    figs[str(paths.figure("knockout"))] = knockout_curves(list(knock.values()))
    figs[str(paths.figure("attention_roles"))] = attention_role_distributions(att)
    figs[str(paths.figure("mlp_probe_curves"))] = probe_similarity_curves(probes)
    figs[str(paths.figure("mlp_probe_case"))] = probe_case_trajectory(probes)
    formats = list(ctx.config.analysis.static_formats)
    if formats and find_chromium() is None:
        formats = []
    save_figures(figs, formats=["html", *formats])
    attention_heads_view(patterns).save(paths.figure("key_heads_attention").with_suffix(".html"))
    transfer = pd.read_csv(paths.transfer(".csv"))
    notes = f"Transfer (clean / key-ablated / random-ablated accuracy):\n{transfer.to_string(index=False)}"
    if paths.eval_table.exists():
        table = pd.read_csv(paths.eval_table).to_string(index=False)
        notes += f"\n\nPrecise SFT vs full SFT (Table-1 style; accuracies in %):\n{table}"
    report = build_report(
        paths.report,
        title=f"mathcircuits run: {ctx.config.model.source}",
        model_spec=ctx.model.spec,
        data_summary=ctx.summary("data", DataSummary).to_dict(),
        accuracy_table=pd.read_csv(paths.accuracy_csv),
        patching=per_op,
        patching_overall=overall,
        key_components=key,
        knockout=knock,
        attention=att,
        probes=probes,
        patterns=patterns,
        notes=notes,
    )
    return ReportSummary(report=str(report), figures=len(figs) + 1, static_formats=formats)
