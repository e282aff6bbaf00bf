"""What the identify study hands the report: the patching results, the key components and claim C1."""

from __future__ import annotations

from mathcircuits.claims.sparsity import claim_c1
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.pipeline.reader import ResultReader
from mathcircuits.pipeline.studies.identify.stage import run
from mathcircuits.pipeline.studies.shared import IdentifySummary
from mathcircuits.pipeline.study import Contribution, StudyCode
from mathcircuits.report import ReportParts

__all__: list[str] = []


def report(r: ResultReader) -> Contribution:
    """Each operation's patching result and the pooled one, the key components; C1 (sparse, mid-depth heads)."""
    ctx, paths = r.ctx, r.ctx.paths
    ops = ctx.summary("identify", IdentifySummary).patched_operations
    key = r.load(KeyComponents, paths.key_components, "identify", "key")
    per_op = {op: PatchingResult.load(paths.patching(op)) for op in ops}
    overall = PatchingResult.load(paths.patching("all"))
    c1 = claim_c1(overall, key, ctx.uncertainty, r.off.get("patching", "identify"), r.reasons.get("patching"))
    return Contribution(
        parts=ReportParts(model_spec=overall.model, patching=per_op, patching_overall=overall, key_components=key),
        claims=(c1,),
    )


CODE = StudyCode(run=run, summary=IdentifySummary, report=report)
