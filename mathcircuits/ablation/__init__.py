"""Stage 4 — ablation: mean-ablation knockout curves and transfer checks."""

from mathcircuits.ablation.knockout import (
    HeadMeans,
    KnockoutResult,
    ablated_accuracy,
    ablated_model,
    head_means,
    knockout_curve,
)
from mathcircuits.ablation.transfer import TransferResult, transfer

__all__ = [
    "HeadMeans",
    "KnockoutResult",
    "TransferResult",
    "ablated_accuracy",
    "ablated_model",
    "head_means",
    "knockout_curve",
    "transfer",
]
