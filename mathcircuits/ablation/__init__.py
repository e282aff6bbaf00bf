"""Stage 4 — ablation: knockout curves (mean, per-position mean or resampling) and transfer checks."""

from mathcircuits.ablation.knockout import (
    ABLATIONS,
    Ablation,
    KnockoutResult,
    KnockoutScorer,
    ablated_accuracy,
    ablated_model,
    knockout_curve,
)
from mathcircuits.ablation.means import HeadMeans, head_means
from mathcircuits.ablation.transfer import TransferResult, transfer

__all__ = [
    "ABLATIONS",
    "Ablation",
    "HeadMeans",
    "KnockoutResult",
    "KnockoutScorer",
    "TransferResult",
    "ablated_accuracy",
    "ablated_model",
    "head_means",
    "knockout_curve",
    "transfer",
]
