"""The values the validation stage returns: the knockout curve and the transfer table, row by row."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal, TypeAlias

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._codec import Encoded, Fixed, FlatSpec, encode_fields
from mathcircuits._io import SavedResult
from mathcircuits.ablation.hooks import Ablation, Scope
from mathcircuits.models.heads import Head
from mathcircuits.stats import Interval
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, wilson_interval

__all__ = [
    "KnockoutResult",
    "TransferResult",
    "TransferRow",
    "TransferStatus",
]

_WILSON = Fixed("wilson")


def _no_accuracy() -> Interval:
    """No accuracy measured (NaN)."""
    return Interval(math.nan, math.nan, math.nan, 0, method="wilson")


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
        clean: accuracy on all ``n`` items, with its Wilson interval.
        status: :data:`MEASURED`, or :data:`NOT_MEASURABLE` when the clean model answers too few items.
        key: accuracy with the key heads ablated, on the ``n_correct`` clean-correct items (NaN when not
            measurable). Each interval's ``n`` is the row's count of the items it was measured on.
        random: mean accuracy over the random head sets; its pooled Wilson interval is widened to every set's
            accuracy.
        key_drop: ``key.value − 1``, the share of clean-correct items lost.
        ablation: how the set was ablated (``mean`` for sets without counterfactual prompts).
        p_value: among the ``n_draws`` depth-matched random sets,
            ``(1 + #{random accuracy ≤ key accuracy}) / (1 + n_draws)`` (NaN when not measurable).

    Saved flat, as before the intervals were values: ``clean_accuracy``, ``clean_low``, ``clean_high``,
    ``key_ablated_accuracy``, ``key_low``, … (the level is the :class:`TransferResult`'s ``confidence``).
    """

    dataset: str
    held_in: bool
    n: int
    n_correct: int
    clean: Interval
    status: TransferStatus
    key: Interval = field(default_factory=_no_accuracy)
    random: Interval = field(default_factory=_no_accuracy)
    random_ablated_std: float = math.nan
    key_drop: float = math.nan
    random_drop: float = math.nan
    ablation: Ablation = "mean"
    p_value: float = math.nan
    n_draws: int = 0

    FLAT: ClassVar[dict[str, FlatSpec]] = {
        "clean": {"value": "clean_accuracy", "low": "clean_low", "high": "clean_high", "n": "n", "method": _WILSON},
        "key": {
            "value": "key_ablated_accuracy",
            "low": "key_low",
            "high": "key_high",
            "n": "n_correct",
            "method": _WILSON,
        },
        "random": {
            "value": "random_ablated_accuracy",
            "low": "random_low",
            "high": "random_high",
            "n": "n_correct",
            "method": _WILSON,
        },
    }
    #: The saved keys (and the columns of :meth:`TransferResult.to_dataframe`), in their order.
    SAVED_ORDER: ClassVar[tuple[str, ...]] = (
        "dataset", "held_in", "n", "n_correct", "clean_accuracy", "clean_low", "clean_high", "status",
        "key_ablated_accuracy", "key_low", "key_high", "random_ablated_accuracy", "random_low", "random_high",
        "random_ablated_std", "key_drop", "random_drop", "ablation", "p_value", "n_draws",
    )  # fmt: skip

    def __post_init__(self) -> None:
        # each interval counts the items it was measured on, as the row saves it: all items, or the clean-correct
        for name, spec in self.FLAT.items():
            iv, n = getattr(self, name), getattr(self, str(spec["n"]))
            if (iv.n, iv.method) != (n, "wilson"):
                object.__setattr__(self, name, replace(iv, n=n, method="wilson"))

    @property
    def measured(self) -> bool:
        """Whether the set was measurable (its ablated accuracies are numbers)."""
        return self.status == MEASURED

    def at_level(self, confidence: float) -> TransferRow:
        """The row with its intervals' level set to ``confidence`` (the level is saved once, by the result)."""
        ivs = {k: replace(getattr(self, k), confidence=confidence) for k in self.FLAT}
        return replace(self, **ivs)

    def to_dict(self) -> Encoded:
        """The row as a plain dict (the columns of :meth:`TransferResult.to_dataframe`)."""
        return encode_fields(self)


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

    def __post_init__(self) -> None:
        # the rows' intervals are at the result's level (a row does not save its own)
        object.__setattr__(self, "rows", tuple(r.at_level(self.confidence) for r in self.rows))

    def measured(self) -> list[TransferRow]:
        """The rows whose set the clean model answers well enough to measure transfer on."""
        return [r for r in self.rows if r.measured]

    def to_dataframe(self):
        """One row per set: status, clean accuracy and the key/random-ablated accuracies on the clean-correct
        items, each with its Wilson interval (``*_low``, ``*_high``).
        """

        return pd.DataFrame([r.to_dict() for r in self.rows], columns=list(TransferRow.SAVED_ORDER))

    def summary_items(self) -> list[tuple[str, str]]:
        """The sets, how many were measurable, and the key heads' accuracy on each measured one."""
        measured = "; ".join(f"{r.dataset} {r.key.value:.0%}" for r in self.measured()) or "none"
        return [
            ("sets", str(len(self.rows))),
            ("measurable", str(len(self.measured()))),
            ("key heads", ", ".join(str(Head.of(h)) for h in self.key_heads)),
            ("key-ablated", measured),
        ]
