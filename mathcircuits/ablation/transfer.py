"""Transfer: do the key heads matter beyond the data they were found on? (Zhang et al. 2024, §3.4)

For each evaluation set (other operations, other templates, multi-digit
operands, real word problems) we measure accuracy with nothing ablated, with
the key heads mean-ablated, and with as many random heads mean-ablated
(several seeds). A large drop for key heads and a small one for random heads
means the circuit transfers. The ablation mean is the one of
:mod:`mathcircuits.ablation.knockout` (computed on the identification data's
counterfactual prompts), so every set is ablated the same way.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from mathcircuits._io import SavedResult
from mathcircuits.ablation.knockout import HeadMeans, _as_heads, ablated_accuracy

__all__ = ["TransferResult", "transfer"]


@dataclass(frozen=True)
class TransferResult(SavedResult):
    """One row per evaluation set: clean, key-ablated and random-ablated accuracy."""

    rows: list[dict[str, Any]]
    key_heads: list[tuple[int, int]]
    n_random: int
    scope: str = "all"
    notes: dict[str, Any] = field(default_factory=dict)

    STAGE = "validate"

    def to_dataframe(self):

        return pd.DataFrame(self.rows)


def transfer(
    model: Any,
    eval_sets: dict[str, Any],
    key_heads: Any,
    means: HeadMeans,
    n_random: int = 3,
    seed: int = 0,
    scope: str = "all",
    progress: bool = False,
) -> TransferResult:
    """Accuracy on each named dataset: clean, key heads ablated, random heads ablated (mean ± std).

    Args:
        model: the hooked model.
        eval_sets: name → pairs (empty sets are skipped).
        key_heads: a :class:`~mathcircuits.patching.KeyComponents` of this model, or ``[(layer, head), ...]``.
        means: :class:`HeadMeans` taken on this model.
        n_random: random head sets per dataset.
        seed: seed of the random head sets.
        scope: ``"all"`` positions or only the ``"last"``.
        progress: show a progress bar.

    Returns:
        The :class:`TransferResult`. Heads or means of another model raise an error naming both models.
    """

    spec = model.spec
    key_heads = _as_heads(model, key_heads)
    means.check_model(spec)
    all_heads = [(l, h) for l in range(spec.n_layers) for h in range(spec.n_heads)]
    rng = random.Random(seed)
    rows = []
    for name, ds in tqdm(eval_sets.items(), disable=not progress, desc="transfer"):
        if len(ds) == 0:
            continue
        clean = ablated_accuracy(model, ds, [], means, scope)
        key = ablated_accuracy(model, ds, list(key_heads), means, scope)
        rand = [
            ablated_accuracy(model, ds, rng.sample(all_heads, len(key_heads)), means, scope) for _ in range(n_random)
        ]
        rows.append(
            {
                "dataset": name,
                "n": len(ds),
                "clean_accuracy": clean,
                "key_ablated_accuracy": key,
                "random_ablated_accuracy": statistics.mean(rand) if rand else float("nan"),
                "random_ablated_std": statistics.pstdev(rand) if len(rand) > 1 else 0.0,
                "key_drop": key - clean,
                "random_drop": (statistics.mean(rand) - clean) if rand else float("nan"),
            }
        )
    return TransferResult(rows=rows, key_heads=[tuple(h) for h in key_heads], n_random=n_random, scope=scope)
