"""What the evaluate study hands the report: the evaluation table and claim C6 (from the evaluated models)."""

from __future__ import annotations

from mathcircuits.claims.finetune import claim_c6
from mathcircuits.claims.improve import precise_definition
from mathcircuits.evaluation import EvalResult
from mathcircuits.finetune import SFTResult
from mathcircuits.finetune.matched import kv_shared_heads
from mathcircuits.pipeline.reader import ResultReader
from mathcircuits.pipeline.studies.evaluate.stage import EvaluateSummary, evaluated_labels, evaluation_table, run
from mathcircuits.pipeline.study import Contribution, StudyCode
from mathcircuits.report import ReportParts
from mathcircuits.stats import DeltaTable

__all__: list[str] = []


def _table(r: ResultReader) -> DeltaTable | None:
    """The evaluate stage's table, rebuilt from the results it saved (None when it did not run or was off)."""
    ctx = r.ctx
    if not ctx.paths.marker("evaluate").exists() or ctx.summary("evaluate", EvaluateSummary).skipped:
        return None
    labels = evaluated_labels(ctx)
    results = {m: res for m in labels if (res := r.load(EvalResult, ctx.paths.eval_result(m)))}
    return evaluation_table(ctx, results, labels)


def _precise(r: ResultReader) -> str:
    """What "precise" tuned, in words (heads only; the non-key heads changed through shared K/V)."""
    sft = r.load(SFTResult, r.ctx.paths.sft_result("precise"))
    if sft is None or sft.slices is None:
        return ""
    sl = sft.slices
    text = precise_definition(len(sl.heads), len(kv_shared_heads(sl)), sft.n_trainable)
    return text + (f" + the key MLPs {list(sl.mlps)} (that is precise+mlp)" if sl.mlps else "")


def report(r: ResultReader) -> Contribution:
    """The table of base and tuned models; C6 (precise SFT matches full SFT on arithmetic, keeps generic ability)."""
    ctx, paths = r.ctx, r.ctx.paths
    evals = {m: res for m in ("base", "precise", "full") if (res := r.load(EvalResult, paths.eval_result(m)))}
    why = None
    if not evals and paths.marker("evaluate").exists():  # the stage ran, but wrote no model's results
        e, f = ctx.config.evaluation, ctx.config.finetune
        why = (
            "stage evaluate off: evaluation.enabled is false"
            if not e.enabled
            else "no model evaluated: finetune off or no fine-tuned model, and no benchmark folder found"
            if not f.enabled
            else "no evaluation results written: re-run evaluate"
        )
    c6 = claim_c6(evals or None, ctx.uncertainty, r.off.get("evals", "evaluate"), why, _precise(r) if evals else "")
    return Contribution(parts=ReportParts(evaluation=_table(r)), claims=(c6,))


CODE = StudyCode(run=run, summary=EvaluateSummary, report=report)
