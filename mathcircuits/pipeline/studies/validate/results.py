"""What the validate study hands the report: the knockout curves, the transfer table and claims C2, C4, C5."""

from __future__ import annotations

from mathcircuits.ablation import CrossOperation, KnockoutResult, MLPMediation, RandomControl, TransferResult
from mathcircuits.claims.knockout import claim_c2, claim_c5
from mathcircuits.claims.margin import claim_c4
from mathcircuits.pipeline.reader import ResultReader
from mathcircuits.pipeline.studies.shared import IdentifySummary
from mathcircuits.pipeline.studies.validate.stage import ValidateSummary, run
from mathcircuits.pipeline.study import Contribution, StudyCode
from mathcircuits.report import ReportParts

__all__: list[str] = []


def report(r: ResultReader) -> Contribution:
    """The knockout curve of each operation, the transfer table; C2 (key vs random sets), C4 (the later MLPs'
    share of the key heads' effect), C5 (transfer)."""
    ctx, paths, u = r.ctx, r.ctx.paths, r.ctx.uncertainty
    ops = ctx.summary("identify", IdentifySummary).patched_operations
    knock = {op: k for op in ops if (k := r.load(KnockoutResult, paths.knockout(op), "validate", "knockout"))}
    tr = r.load(TransferResult, paths.transfer(), "validate", "transfer")
    control = r.load(RandomControl, paths.control(), "validate", "control")
    mediation = r.load(MLPMediation, paths.mlp_mediation, "validate", "mediation")
    cross = r.load(CrossOperation, paths.cross_operation(), "validate", "cross_operation")

    def stage(name: str) -> str:
        return r.off.get(name, "validate")

    return Contribution(
        parts=ReportParts(knockout=knock, transfer=tr),
        claims=(
            claim_c2(control, u, stage("control"), r.reasons.get("control")),
            claim_c4(mediation, u, stage("mediation"), r.reasons.get("mediation")),
            claim_c5(tr, u.confidence, stage("transfer"), r.reasons.get("transfer"), cross),
        ),
    )


CODE = StudyCode(run=run, summary=ValidateSummary, report=report)
