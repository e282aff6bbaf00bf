"""A percentile bootstrap of a mean over pairs (Efron & Tibshirani 1993, §13).

Resample the pairs with replacement ``n_boot`` times, take each resample's mean, and
report the ``(1 − confidence)/2`` and ``(1 + confidence)/2`` quantiles. Kept here until
the toolkit has one statistics module.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

__all__ = ["bootstrap_mean", "bootstrap_ratio"]


def _indices(n: int, n_boot: int, generator: torch.Generator | None) -> Tensor:
    if n < 2:
        raise ValueError(f"a bootstrap over {n} pair(s) has no spread. Fix: use at least 2 pairs (better 20+).")
    return torch.randint(0, n, (n_boot, n), generator=generator)


def bootstrap_mean(
    values: Float[Tensor, " pair"],
    n_boot: int = 1000,
    confidence: float = 0.95,
    generator: torch.Generator | None = None,
) -> tuple[float, float, float]:
    """Mean of ``values`` and its percentile bootstrap interval.

    Args:
        values: one value per pair.
        n_boot: resamples.
        confidence: the interval's coverage.
        generator: random source (for reproducible intervals).

    Returns:
        ``(mean, low, high)``.
    """
    v = values.double().flatten()
    means = v[_indices(len(v), n_boot, generator)].mean(1)
    a = (1 - confidence) / 2
    q = torch.quantile(means, torch.tensor([a, 1 - a], dtype=torch.float64))
    return float(v.mean()), float(q[0]), float(q[1])


def bootstrap_ratio(
    num: Float[Tensor, " pair"],
    den: Float[Tensor, " pair"],
    n_boot: int = 1000,
    confidence: float = 0.95,
    generator: torch.Generator | None = None,
) -> tuple[float, float, float]:
    """``mean(num) / mean(den)`` and its percentile bootstrap interval (pairs resampled jointly).

    Args:
        num: per-pair numerator values, shape ``[pair]``.
        den: per-pair denominator values, shape ``[pair]`` (the same pairs as ``num``).
        n_boot: number of bootstrap resamples.
        confidence: coverage of the interval (e.g. 0.95).
        generator: random generator for the resampling (None: torch's global one).

    Returns:
        ``(ratio, low, high)``: the ratio of means and the interval's bounds, as floats.

    Raises:
        ValueError: if there are fewer than 2 pairs.
    """
    n, d = num.double().flatten(), den.double().flatten()
    idx = _indices(len(n), n_boot, generator)
    ratios = n[idx].mean(1) / d[idx].mean(1)
    a = (1 - confidence) / 2
    q = torch.quantile(ratios, torch.tensor([a, 1 - a], dtype=torch.float64))
    return float(n.mean() / d.mean()), float(q[0]), float(q[1])
