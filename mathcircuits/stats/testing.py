"""Many tests at once: Holm's and Benjamini–Hochberg's corrections, and a bias-corrected bootstrap of a statistic.

* **Holm** (1979): reject ``p_(i) ≤ α/(m − i + 1)`` in order until the first failure. It controls the family-wise
  error rate, so the number of rejections is a ``1 − α`` lower confidence bound on the number of false nulls.
* **Benjamini–Hochberg** (1995): reject the ``k`` smallest, ``k`` the largest ``i`` with ``p_(i) ≤ i·q/m``;
  controls the false discovery rate at ``q``.
* **Bias-corrected bootstrap** of a statistic that resampling biases (a top-k share: a resample's top heads are
  selected on its noise). Estimate ``θ̃ = 2θ̂ − mean(θ*)``; interval ``[2θ̂ − q*_{1−α/2}, 2θ̂ − q*_{α/2}]``
  (basic bootstrap, Davison & Hinkley 1997 §5.2), which keeps the estimate inside its interval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from scipy.stats import false_discovery_control
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.stats.bootstrap import bootstrap_indices, cluster_bootstrap_indices
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY, Interval, IntervalMethod, Uncertainty
from mathcircuits.stats.small_clusters import cluster_means

__all__: list[str] = []


def _sorted_p(p: Tensor) -> tuple[Tensor, Tensor]:
    flat = torch.as_tensor(p, dtype=torch.float64).reshape(-1)
    if bool(torch.isnan(flat).any()):
        raise FixableValueError("p-values contain NaN. ", "leave untested cells out before correcting.")
    return flat.sort()


def holm(p: Tensor, alpha: float = 0.05) -> Tensor:
    """Which hypotheses Holm's step-down procedure rejects at family-wise level ``alpha`` (shaped like ``p``)."""
    ps, order = _sorted_p(p)
    m = ps.numel()
    ok = ps <= alpha / (m - torch.arange(m, dtype=torch.float64))
    k = int(ok.long().cumprod(0).sum())  # the first failure stops the procedure
    out = torch.zeros(m, dtype=torch.bool)
    out[order[:k]] = True
    return out.reshape(torch.as_tensor(p).shape)


def benjamini_hochberg(p: Tensor, q: float = 0.05) -> Tensor:
    """Which hypotheses the Benjamini–Hochberg step-up procedure rejects at false discovery rate ``q``
    (scipy's adjusted p-values, :func:`scipy.stats.false_discovery_control`, at most ``q``)."""
    ps, _ = _sorted_p(p)  # refuses NaN
    if ps.numel() == 0:
        return torch.zeros_like(torch.as_tensor(p), dtype=torch.bool)
    flat = torch.as_tensor(p, dtype=torch.float64).reshape(-1).numpy()
    adjusted = torch.as_tensor(false_discovery_control(flat, method="bh"))
    return (adjusted <= q).reshape(torch.as_tensor(p).shape)


def bias_corrected_bootstrap(
    values: Tensor,
    statistic: Callable[[Tensor], float],
    clusters: Sequence[object] | None = None,
    strata: Sequence[object] | None = None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    bounds: tuple[float, float] = (-float("inf"), float("inf")),
) -> Interval:
    """Bias-corrected estimate and basic-bootstrap interval of ``statistic`` (module docstring).

    Whole clusters are resampled within ``strata`` when every stratum has two, else rows. ``bounds`` is the
    statistic's range (a share: ``(0, 1)``); estimate and interval are clipped to it.
    """
    n_boot, confidence, seed = uncertainty.n_boot, uncertainty.confidence, uncertainty.seed
    x = torch.as_tensor(values, dtype=torch.float64)
    try:
        resamples = cluster_bootstrap_indices(list(clusters), strata, n_boot, seed) if clusters is not None else None
    except ValueError:
        resamples = None
    if resamples is None:
        resamples = list(bootstrap_indices(x.shape[0], n_boot, seed))
    obs = float(statistic(x))
    boots = torch.tensor([statistic(x[i]) for i in resamples], dtype=torch.float64)
    boots = boots[~torch.isnan(boots)]
    if boots.numel() == 0 or obs != obs:
        nan = float("nan")
        return Interval(obs, nan, nan, int(x.shape[0]), confidence, "bias_corrected_bootstrap", seed)
    a = 1 - confidence
    q = torch.quantile(boots, torch.tensor([a / 2, 1 - a / 2], dtype=torch.float64))
    lo_b, hi_b = bounds

    def clip(v: float) -> float:
        return min(hi_b, max(lo_b, v))

    est, low, high = clip(2 * obs - float(boots.mean())), clip(2 * obs - float(q[1])), clip(2 * obs - float(q[0]))
    return Interval(est, low, high, int(x.shape[0]), confidence, "bias_corrected_bootstrap", seed)


@dataclass(frozen=True)
class NullPlacement:
    """Where a measured value falls among the values of a null (random sets), and how sure that is.

    ``percentile``: share (0–100) of null values below the measured one (ties count half); ``p_value``:
    ``(1 + #{null ≥ measured}) / (1 + n_null)``; ``p_high``: the ``confidence`` quantile of the p-value over template
    resamples; ``method``: ``cluster_bootstrap`` or ``bootstrap`` (too few templates).
    """

    percentile: float
    p_value: float
    p_high: float
    n_null: int
    method: IntervalMethod


def _place(theta: Tensor) -> tuple[Tensor, Tensor]:
    key, null = theta[..., :1], theta[..., 1:]
    tie = 1e-6 * (1 + key.abs())  # float32 measurements: equal up to rounding
    ge = (null >= key - tie).sum(-1).double()
    below = (null < key - tie).sum(-1) + 0.5 * ((null - key).abs() <= tie).sum(-1)
    return 100 * below / null.shape[-1], (1 + ge) / (1 + null.shape[-1])


def null_placement(
    values: Tensor,
    clusters: Sequence[object] | None,
    strata: Sequence[object] | None = None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> NullPlacement:
    """Place column 0 (the measured set) among columns 1.. (the null's sets) by their mean of template means.

    ``values`` is [row, 1 + n_null] (e.g. per-pair margin drops of the key set, then of each random set); every
    resample keeps the rows paired across the columns. ``clusters=None``: rows are the units.
    """
    x = torch.as_tensor(values, dtype=torch.float64)
    if x.ndim != 2 or x.shape[1] < 2:
        raise FixableValueError(
            f"null_placement needs [row, 1 + n_null] values, got {tuple(x.shape)}. ", "add the null."
        )
    method: IntervalMethod = "bootstrap"
    units = list(range(x.shape[0]))
    if clusters is not None and len(set(clusters)) >= 2:
        per: dict[object, set[object]] = {}
        for c, s in zip(clusters, strata if strata is not None else [0] * len(clusters)):
            per.setdefault(s, set()).add(c)
        strata = strata if strata is not None and all(len(cs) >= 2 for cs in per.values()) else None
        units, method = list(clusters), "cluster_bootstrap"
    else:
        strata = None
    cm = cluster_means(x, units, strata)
    pct, p = _place(cm.estimate()[0])
    _, p_star = _place(cm.estimate(cm.means[cm.resample(uncertainty.n_boot, uncertainty.seed)])[0])
    p_high = float(torch.quantile(p_star, uncertainty.confidence))
    return NullPlacement(float(pct), float(p), p_high, x.shape[1] - 1, method)
