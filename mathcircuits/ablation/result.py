"""The values the validation stage returns: the knockout curve and the transfer table, row by row."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar, Literal, TypeAlias

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._codec import Encoded
from mathcircuits._io import SavedResult
from mathcircuits.ablation.hooks import Ablation, Scope
from mathcircuits.models.heads import Head
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, wilson_interval

__all__ = [
    "KnockoutResult",
    "TransferResult",
    "TransferRow",
    "TransferStatus",
]

MEASURED = "measured"
NOT_MEASURABLE = "not measurable on this model"
#: Whether a transfer set could be measured (the clean model answers enough of it).
TransferStatus: TypeAlias = Literal["measured", "not measurable on this model"]


@dataclass(frozen=True, repr=False)
class KnockoutResult(SavedResult):
    """Accuracy as heads are knocked out: in effect-rank order and in random orders."""

    ks: list[int]
    ranked_accuracy: list[float]
    random_accuracy: Float[Tensor, "seed k"]
    baseline_accuracy: float
    operation: str
    ranked_heads: list[Head] = field(default_factory=list)
    n_pairs: int = 0
    scope: Scope = "all"
    seeds: list[int] = field(default_factory=list)
    ablation: Ablation = "mean"

    STAGE = "validate"
    VERSION = 3

    def to_dataframe(self):
        """One row per k: ranked accuracy with its Wilson 95% interval over the ``n_pairs`` pairs
        (ranked_low, ranked_high), the random orders' mean, std and range (random_min, random_max), and drops.
        """

        rnd = self.random_accuracy
        wilson = [wilson_interval(round(a * self.n_pairs), self.n_pairs) for a in self.ranked_accuracy]
        return pd.DataFrame(
            {
                "k": self.ks,
                "ranked_accuracy": self.ranked_accuracy,
                "ranked_low": [w.low for w in wilson],
                "ranked_high": [w.high for w in wilson],
                "random_mean": rnd.mean(0).tolist(),
                "random_std": (rnd.std(0) if rnd.shape[0] > 1 else torch.zeros(rnd.shape[1])).tolist(),
                "random_min": rnd.min(0).values.tolist(),
                "random_max": rnd.max(0).values.tolist(),
                "ranked_drop": [a - self.baseline_accuracy for a in self.ranked_accuracy],
                "random_drop": [float(a) - self.baseline_accuracy for a in rnd.mean(0)],
            }
        )

    def summary_items(self) -> list[tuple[str, str]]:
        """Operation, pairs, ablation, and accuracy with nothing, the top k and k random heads removed."""
        rnd = float(self.random_accuracy[:, -1].mean()) if self.random_accuracy.numel() else float("nan")
        return [
            ("operation", self.operation),
            ("pairs", str(self.n_pairs)),
            ("ablation", f"{self.ablation}, {self.scope}"),
            (
                "accuracy",
                f"{self.baseline_accuracy:.0%} → top {self.ks[-1]} removed {self.ranked_accuracy[-1]:.0%} "
                f"(random {rnd:.0%})",
            ),
        ]


@dataclass(frozen=True)
class TransferRow:
    """One transfer set: clean accuracy, and the ablated accuracies on its clean-correct items.

    Args:
        held_in: the set's data found the key heads (then it is a reference, not transfer).
        status: :data:`MEASURED`, or :data:`NOT_MEASURABLE` when the clean model answers too few items.
        key_ablated_accuracy: on the clean-correct items (NaN when not measurable).
        random_ablated_accuracy: mean over the random head sets; its pooled Wilson interval is widened to
            every set's accuracy.
        key_drop: ``key_ablated_accuracy − 1``, the share of clean-correct items lost.
        ablation: how the set was ablated (``mean`` for sets without counterfactual prompts).
        p_value: among the ``n_draws`` depth-matched random sets,
            ``(1 + #{random accuracy ≤ key accuracy}) / (1 + n_draws)`` (NaN when not measurable).
    """

    dataset: str
    held_in: bool
    n: int
    n_correct: int
    clean_accuracy: float
    clean_low: float
    clean_high: float
    status: TransferStatus
    key_ablated_accuracy: float = math.nan
    key_low: float = math.nan
    key_high: float = math.nan
    random_ablated_accuracy: float = math.nan
    random_low: float = math.nan
    random_high: float = math.nan
    random_ablated_std: float = math.nan
    key_drop: float = math.nan
    random_drop: float = math.nan
    ablation: Ablation = "mean"
    p_value: float = math.nan
    n_draws: int = 0

    @property
    def measured(self) -> bool:
        """Whether the set was measurable (its ablated accuracies are numbers)."""
        return self.status == MEASURED

    def to_dict(self) -> Encoded:
        """The row as a plain dict (the columns of :meth:`TransferResult.to_dataframe`)."""
        return asdict(self)


@dataclass(frozen=True, repr=False)
class TransferResult(SavedResult):
    """One :class:`TransferRow` per evaluation set, with the thresholds that make a set measurable."""

    rows: tuple[TransferRow, ...]
    key_heads: list[Head]
    n_random: int
    scope: Scope = "all"
    notes: dict[str, str] = field(default_factory=dict)
    min_clean_accuracy: float = 0.5
    min_correct: int = 5
    confidence: float = DEFAULT_CONFIDENCE
    seed: int = 0

    STAGE = "validate"
    VERSION: ClassVar[int] = 4

    def measured(self) -> list[TransferRow]:
        """The rows whose set the clean model answers well enough to measure transfer on."""
        return [r for r in self.rows if r.measured]

    def to_dataframe(self):
        """One row per set: status, clean accuracy and the key/random-ablated accuracies on the clean-correct
        items, each with its Wilson interval (``*_low``, ``*_high``).
        """

        return pd.DataFrame([r.to_dict() for r in self.rows], columns=[f.name for f in fields(TransferRow)])

    def summary_items(self) -> list[tuple[str, str]]:
        """The sets, how many were measurable, and the key heads' accuracy on each measured one."""
        measured = "; ".join(f"{r.dataset} {r.key_ablated_accuracy:.0%}" for r in self.measured()) or "none"
        return [
            ("sets", str(len(self.rows))),
            ("measurable", str(len(self.measured()))),
            ("key heads", ", ".join(str(Head.of(h)) for h in self.key_heads)),
            ("key-ablated", measured),
        ]
