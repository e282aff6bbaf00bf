"""What the studies read of one another: identify's summary (the operations it patched, the key heads) and the
facts its pairs used, which validate, analyze and the cross-model comparison read. Below every study folder, so
the folders stay independent of each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mathcircuits.data import Operation, PairSet
from mathcircuits.data.facts import Fact, facts_of
from mathcircuits.models import Head
from mathcircuits.patching import PatchingResult
from mathcircuits.pipeline.context import Context, StageSummary
from mathcircuits.pipeline.facts import FactUse
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
    totals: dict[Operation, OperationTotal] = field(default_factory=dict)  # older summaries have none
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
