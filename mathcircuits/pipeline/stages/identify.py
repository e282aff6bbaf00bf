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

from dataclasses import dataclass, field

from mathcircuits._errors import FixableRuntimeError
from mathcircuits.data import Operation, PairSet
from mathcircuits.data.facts import Fact, facts_of
from mathcircuits.models import Head
from mathcircuits.patching import (
    PatchingResult,
    SelectionConfig,
    path_patch,
    select_key_components,
    selection_stability,
)
from mathcircuits.pipeline.context import Context, StageSummary, save_csv, select_pairs
from mathcircuits.pipeline.facts import FactUse, fact_use, stage_rows
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.interval import format_share

__all__ = [
    "IdentifySummary",
    "OperationTotal",
]


@dataclass(frozen=True)
class PatchedOperation:
    """One operation's patching, in brief: its pairs, time and strongest heads ``(layer, head, effect)``."""

    n_pairs: int
    seconds: float
    top_heads: list[tuple[int, int, float]]


@dataclass(frozen=True)
class OperationTotal:
    """One operation's total effect (counterfactual vs clean prompt, the patching metric) and what it says.

    ``effect`` is ``[mean, low, high]`` (``interval`` names the bootstrap); ``top_shares`` the strongest heads'
    effects (in the order of ``PatchedOperation.top_heads``) as a share of the mean; ``n_excluded`` the pairs
    the metric refused (``relative_logit``'s guard).
    """

    effect: list[float]
    interval: str
    top_shares: list[float] = field(default_factory=list)
    n_excluded: int = 0


@dataclass(frozen=True)
class IdentifySummary(StageSummary):
    """Which operations were patched, the strongest heads and the key components selected."""

    correct_pairs: dict[Operation, int]
    patched_operations: list[Operation]
    results: dict[Operation, PatchedOperation] = field(default_factory=dict)
    key_heads: list[Head] = field(default_factory=list)
    key_mlps: list[int] = field(default_factory=list)
    key_head_fraction: float = 0.0
    rule: str = ""
    top_heads: list[list[int | float]] = field(default_factory=list)  # [layer, head, effect]
    stability: list[float] = field(default_factory=list)  # per key head: share of resamples selecting it
    metric: str = ""
    totals: dict[Operation, OperationTotal] = field(default_factory=dict)  # summaries before issue #23 have none
    facts: FactUse | None = None  # the facts patched, and how many another stage owns (0)

    def lines(self) -> list[str]:
        top = ", ".join(f"{Head(l, h)} {e:+.3f}" for l, h, e in self.top_heads[:10])
        totals = []
        for op, t in self.totals.items():
            if len(t.effect) == 3:
                v, lo, hi = t.effect
                # the share is of |total|: its sign against the total's sign is the direction, said in words
                s = t.top_shares[0] * (1 if v >= 0 else -1) if t.top_shares else 0.0
                share = f"; top head carries {format_share(s)}" if t.top_shares else ""
                totals.append(f"{op} {v:+.3f} [{lo:+.3f}, {hi:+.3f}]{share}")
        excluded = {op: t.n_excluded for op, t in self.totals.items() if t.n_excluded}
        out = [
            f"  patched operations: {self.patched_operations}  (correct pairs: {self.correct_pairs})",
            *([self.facts.line()] if self.facts is not None else []),
            f"  top heads (layer, head, effect in {self.metric or 'the metric'}): {top}",
        ]
        if totals:
            interval = next(iter(self.totals.values())).interval or "bootstrap"
            out.append(f"  total effect (counterfactual vs clean, 95% {interval}): " + "; ".join(totals))
        if excluded:
            out.append(f"  WARNING: pairs excluded by the metric's guard (clean logit too small): {excluded}")
        return out + [
            (
                f"  key heads ({self.rule}): {[list(h) for h in self.key_heads]}  = "
                f"{100 * self.key_head_fraction:.1f}% of heads; key MLPs: {self.key_mlps}"
            ),
            "  selected again in bootstrap resamples (templates within operations, or pairs): "
            + (", ".join(f"{h} {s:.0%}" for h, s in zip(self.key_heads, self.stability)) or "not measured"),
        ]


def patched_facts(ctx: Context, correct: PairSet) -> frozenset[Fact]:
    """The facts of the pairs identify patched, read back from the saved patching results' pair ids.

    Args:
        ctx: the run context (identify done).
        correct: the data stage's correct pairs.

    Returns:
        Those facts ``(op, a, b)``.
    """
    ops = ctx.summary("identify", IdentifySummary).patched_operations
    ids = {int(i) for op in ops for i in PatchingResult.load(ctx.paths.patching(op)).pair_ids}
    rows = correct.of_pair_ids(ids)
    return facts_of(rows) if len(rows) else frozenset()


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
        res = path_patch(
            ctx.model,
            sub,
            senders=p.senders,
            metric=p.metric,
            method=p.method,
            batch_size=p.batch_size,
            keep_per_pair=True,
            progress=ctx.progress,
            max_memory=p.max_memory or None,
        )
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
