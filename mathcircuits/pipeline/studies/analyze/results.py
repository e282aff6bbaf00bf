"""What the analyze study hands the report: attention by token role, MLP probes, head patterns and claim C3."""

from __future__ import annotations

from pathlib import Path

from mathcircuits.analysis import AttentionByRole, HeadPatterns, MLPProbeResult
from mathcircuits.claims.attention import claim_c3
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.pipeline.reader import ResultReader
from mathcircuits.pipeline.studies.analyze.stage import AnalyzeSummary, run
from mathcircuits.pipeline.study import Contribution, StudyCode
from mathcircuits.report import ReportParts
from mathcircuits.viz import attention_heads_view

__all__: list[str] = []


def report(r: ResultReader) -> Contribution:
    """Where the key heads attend, what the MLPs write, the key heads' patterns as an interactive view; C3 (the
    key heads attend to the operands and the operator), left out the pairs that chose the heads."""
    ctx, paths = r.ctx, r.ctx.paths
    key = r.load(KeyComponents, paths.key_components, "identify", "key")
    att = r.load(AttentionByRole, paths.attention(), "analyze", "attention")
    probes = r.load(MLPProbeResult, paths.probes(), "analyze", "probes")
    layer_att = r.load(AttentionByRole, paths.attention_layers(), "analyze", "attention")
    patterns = r.load(HeadPatterns, paths.patterns, "analyze", "patterns")
    overall = PatchingResult.load(paths.patching("all"))
    chose = overall.pair_ids if overall.pair_ids else None
    c3 = claim_c3(layer_att, key, ctx.uncertainty, r.off.get("attention", "analyze"), r.reasons.get("attention"), chose)

    def view(path: Path) -> None:
        attention_heads_view(patterns).save(path)  # type: ignore[arg-type]

    return Contribution(
        parts=ReportParts(attention=att, attention_layers=layer_att, probes=probes, patterns=patterns),
        claims=(c3,),
        views={"key_heads_attention": view} if patterns is not None else {},
    )


CODE = StudyCode(run=run, summary=AnalyzeSummary, report=report)
