"""Key sets per operation, their overlap, and transfer across operations (Zhang et al. 2024, §3.4).

The paper claims heads found on one operation matter for the others. Each operation ``X``'s key set
(selected from ``X``'s own patching result, the pooled set's rule) is knocked out on the fresh pairs of
every operation ``Y``. Overlap is the Jaccard index with the counts beside it, so a reader sees "3 of 8
and 3 of 10" rather than a bare ratio.

Usage::

    cross = cross_operation({"add": scorer_add, "mul": scorer_mul}, {"add": add_heads, "mul": mul_heads})
    cross.to_dataframe()   # one row per (source, target)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits.ablation.scorer import KnockoutScorer
from mathcircuits.data import Operation
from mathcircuits.models import Head
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, wilson_interval

__all__ = [
    "CrossOperation",
    "cross_operation",
]


def jaccard(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> float:
    """``|a ∩ b| / |a ∪ b|`` of two head sets (NaN when both are empty)."""
    sa, sb = {tuple(h) for h in a}, {tuple(h) for h in b}
    return len(sa & sb) / len(sa | sb) if sa | sb else float("nan")


@dataclass(frozen=True, repr=False)
class CrossOperation(SavedResult):
    """Accuracy on each target operation's fresh pairs with each source operation's key set knocked out.

    ``ablated_accuracy[i, j]``: source ``operations[i]``'s key set knocked out on target ``operations[j]``.
    """

    operations: list[Operation]
    key_sets: dict[Operation, list[Head]]
    clean_accuracy: list[float]
    ablated_accuracy: Float[Tensor, "source target"]
    n_pairs: list[int]

    STAGE = "validate"

    def to_dataframe(self, confidence: float = DEFAULT_CONFIDENCE) -> pd.DataFrame:
        """One row per (source, target): the two key sets' sizes, shared heads and Jaccard index, the clean and
        ablated accuracy on the target's pairs with the ablated accuracy's Wilson interval, and the drop.
        """
        rows = []
        for i, s in enumerate(self.operations):
            for j, t in enumerate(self.operations):
                a, b = self.key_sets[s], self.key_sets[t]
                acc, n = float(self.ablated_accuracy[i, j]), self.n_pairs[j]
                w = wilson_interval(round(acc * n), n, confidence)
                rows.append(
                    {
                        "source": s,
                        "target": t,
                        "source_heads": len(a),
                        "target_heads": len(b),
                        "shared": len({tuple(h) for h in a} & {tuple(h) for h in b}),
                        "jaccard": jaccard(a, b),
                        "n_pairs": n,
                        "clean_accuracy": self.clean_accuracy[j],
                        "ablated_accuracy": acc,
                        "ablated_low": w.low,
                        "ablated_high": w.high,
                        "drop": self.clean_accuracy[j] - acc,
                    }
                )
        return pd.DataFrame(rows)

    def summary_items(self) -> list[tuple[str, str]]:
        """Key set sizes per operation and the mean off-diagonal drop."""
        n = len(self.operations)
        off = [
            self.clean_accuracy[j] - float(self.ablated_accuracy[i, j]) for i in range(n) for j in range(n) if i != j
        ]
        return [
            ("key sets", ", ".join(f"{op} {len(self.key_sets[op])}" for op in self.operations)),
            ("mean drop on other operations", f"{sum(off) / len(off):+.0%}" if off else "n/a"),
        ]


def cross_operation(
    scorers: Mapping[Operation, KnockoutScorer], key_sets: Mapping[Operation, Sequence[tuple[int, int]]]
) -> CrossOperation:
    """Knock each operation's key set out on every operation's pairs (an empty key set leaves the accuracy clean)."""
    ops = list(scorers)
    missing = [op for op in ops if op not in key_sets]
    if missing:
        raise FixableValueError(f"no key set for operations {missing}. ", "pass one key set per scored operation.")
    clean = [scorers[t].accuracy([]) for t in ops]
    acc = torch.zeros(len(ops), len(ops))
    for i, s in enumerate(ops):
        heads = [Head.of(h) for h in key_sets[s]]
        for j, t in enumerate(ops):
            acc[i, j] = scorers[t].accuracy(heads) if heads else clean[j]
    return CrossOperation(
        operations=ops,
        key_sets={op: [Head.of(h) for h in key_sets[op]] for op in ops},
        clean_accuracy=clean,
        ablated_accuracy=acc,
        n_pairs=[len(scorers[t].seqs) for t in ops],
    )
