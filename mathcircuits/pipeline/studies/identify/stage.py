"""Stage ``identify``: path-patch every head and MLP to the logits, per operation and overall (paper §3.2).

Reads the ``patching`` and ``selection`` sections; writes ``identify/patching_<op>.pt``,
``identify/patching_all.pt`` (the pair-weighted mean over operations),
``identify/effects_all.csv`` and ``identify/key_components.json``.

The summary gives, per operation, the **total effect** (the counterfactual prompt against the clean one,
under the same metric) with its interval, the strongest heads' effects as a share of it, and the pairs the
metric refused (``relative_logit``'s guard). Intervals resample templates within operations. Pairs are drawn
from identify's own facts only (:func:`~mathcircuits.pipeline.facts.stage_rows`); the summary counts them.
"""

from __future__ import annotations

from mathcircuits._errors import FixableRuntimeError
from mathcircuits.data import Operation, PairSet
from mathcircuits.patching import (
    PatchingResult,
    SelectionConfig,
    path_patch,
    select_key_components,
    selection_stability,
)
from mathcircuits.pipeline.context import Context, save_csv, select_pairs
from mathcircuits.pipeline.facts import fact_use, stage_rows
from mathcircuits.pipeline.studies.shared import IdentifySummary, OperationTotal, PatchedOperation
from mathcircuits.stats import Uncertainty

__all__: list[str] = []


def run(ctx: Context) -> IdentifySummary:
    """Path-patch every head and MLP per operation (with enough correct pairs) and overall; select key components.

    Args:
        ctx: the run context.

    Returns:
        The stage summary.
    """
    p, s, paths = ctx.config.patching, ctx.config.selection, ctx.paths
    correct = stage_rows(ctx.load_dataset(paths.pairs_correct), "identify")
    counts = {op: sum(1 for o in correct.operations if o == op) for op in ctx.config.data.operations}
    ops = [op for op, n in counts.items() if n >= p.min_pairs]
    if not ops:
        raise FixableRuntimeError(
            f"no operation has at least {p.min_pairs} correct pairs among identify's facts (counts: {counts}). ",
            "raise data.n_per_template or identify's share in data.stage_fact_shares, or lower patching.min_pairs.",
        )
    results: dict[Operation, PatchedOperation] = {}
    totals: dict[Operation, OperationTotal] = {}
    used, per_op = [], []
    for op in ops:
        sub = select_pairs(correct, op, p.max_pairs)
        used.append(sub)
        res = path_patch(ctx.model, sub, config=p, keep_per_pair=True, progress=ctx.progress)
        res.save(paths.patching(op))
        per_op.append(PatchingResult.load(paths.patching(op)))  # as saved, so the overall mean is bit-reproducible
        results[op] = PatchedOperation(
            n_pairs=res.n_pairs,
            seconds=round(res.seconds, 2),
            top_heads=[(l, h, round(e, 5)) for l, h, e in res.top_heads(10)],
        )
        total = res.total_interval()
        usable = total.n > 0 and abs(total.value) > 1e-12
        totals[op] = OperationTotal(
            effect=[round(x, 5) for x in (total.value, total.low, total.high)] if total.n else [],
            interval=total.method,
            top_shares=[round(e / abs(total.value), 5) for *_, e in res.top_heads(10)] if usable else [],
            n_excluded=res.n_excluded,
        )
    patched = PairSet.concat(used)
    overall = PatchingResult.merge(per_op, pair_ids=list(patched.pair_ids))
    overall.save(paths.patching("all"))
    key = select_key_components(overall, s, data=ctx.config.data.generation())
    if not key.heads:  # the topk rule with the configured k (its other settings at their defaults)
        fallback = SelectionConfig(rule="topk", k=s.k, mlp_k=s.mlp_k)
        key = select_key_components(overall, fallback, fallback=f"rule {s.rule} selected no head")
    key = selection_stability(overall, key, Uncertainty(n_boot=200, seed=ctx.config.data.seed))
    key.save(paths.key_components)
    save_csv(overall.to_dataframe(), paths.effects_csv)
    return IdentifySummary(
        correct_pairs=counts,
        patched_operations=ops,
        results=results,
        key_heads=list(key.heads),
        key_mlps=list(key.mlps),
        key_head_fraction=round(key.head_fraction, 4),
        rule=key.rule,
        top_heads=[[l, h, round(e, 5)] for l, h, e in overall.top_heads(10)],
        stability=list(key.stability),
        metric=overall.metric,
        totals=totals,
        facts=fact_use("identify", patched, ctx.config.data.stage_facts()),
    )
