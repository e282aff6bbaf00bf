"""What the number results share: null quantiles, and the error of a model that answers too few prompts.

Null bands are quantiles of draws (shuffles, random subspaces, random knockouts) taken in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mathcircuits._errors import FixableError

__all__ = [
    "TooFewCorrect",
]


class TooFewCorrect(FixableError, ValueError):
    """The model answers too few prompts correctly for a causal analysis: ``problem`` says which, ``fix`` what to do."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}.", fix)


def quantile(x: Tensor, q: float, dim: int = 0) -> Tensor:
    """``torch.quantile`` in float64 along ``dim`` (NaN-aware)."""
    return torch.nanquantile(x.double(), q, dim=dim).float()
