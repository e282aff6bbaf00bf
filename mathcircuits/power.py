"""Uncertainty of a fine-tuning comparison over items *and* training seeds, and the power of a design.

Two fine-tuning modes are compared on the same test items, each trained with several seeds. Their
difference varies with the items drawn (shared by both modes, so paired) and with the training run each
seed gave (independent between modes). An interval over items alone
(:func:`mathcircuits.stats.bootstrap.paired_bootstrap`) ignores the second and is too narrow.

Scores are ``a[s, i]`` (seed ``s`` of mode A, item ``i``) and ``b[t, i]``; ``D = mean_{s,i} a − mean_{t,i} b``.

* **Two-level paired bootstrap** (:func:`seed_item_bootstrap`; Davison & Hinkley 1997, §3.8): each
  resample draws items with replacement (the same for both modes, so item difficulty cancels) and,
  independently per mode, seeds; the percentile interval of ``D``. A one-seed mode (base) adds item
  variance only.
* **Seed-and-item t interval** (:func:`seed_item_t`): ``D ± t_{S−1, 1−α/2} · SE`` with the ``SE`` below and
  ``S`` the fewer seeds of a mode that has several (``n − 1`` items when neither has). With 3 seeds the
  bootstrap's seed term covers about 0.80 at nominal 0.95: resampling 3 values cannot show how
  far a fourth might fall, and ``t`` with ``S − 1`` degrees of freedom can. Claims C6 and C6b use it.
* **Minimum detectable difference** (:func:`detectable_difference`): with
  ``SE² = Var_i(ā_i − b̄_i) / n + Var_s(ā_s) / S_a + Var_t(b̄_t) / S_b`` (``ā_i``: item ``i``
  averaged over seeds; ``ā_s``: seed ``s`` averaged over items), a two-sided test at level ``α``
  detects ``δ`` with probability ``1 − β`` when ``δ ≥ MDD = (z_{1−α/2} + z_{1−β}) · SE`` (normal
  approximation; Cohen 1988, ch. 2). The item term also carries a little seed noise, so the MDD errs
  large. :func:`planned_detectable_difference` is the same formula from planning values.

References: Davison & Hinkley, *Bootstrap Methods and their Application* (1997), §3.8; Cohen,
*Statistical Power Analysis for the Behavioral Sciences* (1988); Koehn, EMNLP 2004.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from scipy.stats import norm
from scipy.stats import t as student_t
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.bootstrap import bootstrap_indices
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, DEFAULT_UNCERTAINTY

__all__ = ["Power", "detectable_difference", "planned_detectable_difference", "seed_item_bootstrap", "seed_item_t"]

ScoresA = Float[Tensor, "seed_a item"] | Sequence[Sequence[float]]
ScoresB = Float[Tensor, "seed_b item"] | Sequence[Sequence[float]]


def _matrix(x: ScoresA | ScoresB, name: str) -> Tensor:
    t = torch.as_tensor(x, dtype=torch.float64)
    if t.ndim == 1:
        t = t[None]
    if t.ndim != 2 or t.shape[0] < 1 or t.shape[1] < 1:
        raise FixableValueError(
            f"{name} must be per-seed, per-item scores [seed, item], got shape {tuple(t.shape)}. ",
            "stack each seed's item scores (one row per seed).",
        )
    return t


def seed_item_bootstrap(
    a: ScoresA,
    b: ScoresB,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> Interval:
    """Interval of ``mean(a) − mean(b)`` resampling items (paired) and each side's seeds (independently).

    ``a`` and ``b`` are [seed, item] on the same items in the same order (a 1-D vector is one seed). The
    seeds' draws use ``uncertainty.seed + 1``. The interval's ``n`` is the item count.
    """
    ta, tb = _matrix(a, "a"), _matrix(b, "b")
    if ta.shape[1] != tb.shape[1]:
        raise FixableValueError(
            f"seed_item_bootstrap: a has {ta.shape[1]} items, b {tb.shape[1]}. ", "score both on the same items."
        )
    n = ta.shape[1]
    n_boot, confidence, seed = uncertainty.n_boot, uncertainty.confidence, uncertainty.seed
    items = bootstrap_indices(n, n_boot, seed)  # [boot, n]
    weights = (
        torch.zeros(n_boot, n, dtype=torch.float64).scatter_add_(1, items, torch.ones(n_boot, n, dtype=torch.float64))
        / n
    )  # each resample's item weights, so a seed's resampled mean is a matrix product
    gen = torch.Generator().manual_seed(int(seed) + 1)

    def side(t: Tensor) -> Tensor:
        per_seed = t @ weights.T  # [seed, boot]
        if t.shape[0] == 1:
            return per_seed[0]
        pick = torch.randint(0, t.shape[0], (n_boot, t.shape[0]), generator=gen)  # [boot, seed draws]
        return per_seed.T.gather(1, pick).mean(1)

    boots = side(ta) - side(tb)
    alpha = 1 - confidence
    q = torch.quantile(boots, torch.tensor([alpha / 2, 1 - alpha / 2], dtype=torch.float64))
    value = float(ta.mean() - tb.mean())
    return Interval(value, float(q[0]), float(q[1]), n, confidence, "seed_item_bootstrap", seed)


def seed_item_t(a: ScoresA, b: ScoresB, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Interval of ``mean(a) − mean(b)``: ``t`` with ``S − 1`` degrees of freedom times the seed-and-item SE.

    ``a`` and ``b`` as in :func:`seed_item_bootstrap`. ``S`` is the fewer seeds of a side with more than one;
    with one seed on both sides the items alone give ``n − 1``.
    """
    ta, tb = _matrix(a, "a"), _matrix(b, "b")
    if ta.shape[1] != tb.shape[1]:
        raise FixableValueError(
            f"seed_item_t: a has {ta.shape[1]} items, b {tb.shape[1]}. ", "score both on the same items."
        )
    n = ta.shape[1]
    se = detectable_difference(ta, tb).se
    seeds = [s for s in (ta.shape[0], tb.shape[0]) if s > 1]
    df = min(seeds) - 1 if seeds else max(n - 1, 1)
    value = float(ta.mean() - tb.mean())
    half = float(student_t.ppf(1 - (1 - confidence) / 2, df)) * se
    return Interval(value, value - half, value + half, n, confidence, "seed_item_t")


@dataclass(frozen=True)
class Power:
    """The smallest true difference a design detects, and the variance components behind it.

    ``mdd`` is in score units, at ``power`` for a two-sided test at ``alpha``; ``item_sd`` is the SD over
    items of the paired, seed-averaged difference; ``seed_sd_a`` / ``seed_sd_b`` the SD over seeds of each
    mode's mean score (0 with one seed).
    """

    mdd: float
    se: float
    item_sd: float
    seed_sd_a: float
    seed_sd_b: float
    n_items: int
    n_seeds_a: int
    n_seeds_b: int
    alpha: float = 0.05
    power: float = 0.8

    def describe(self, unit: str = "points", scale: float = 100.0) -> str:
        """One line: ``MDD = (z + z) · sqrt(...) = … points``, with the numbers filled in."""
        z = _z(self.alpha, self.power)
        return (
            f"MDD = {z:.2f} · sqrt({self.item_sd:.3f}²/{self.n_items} + {self.seed_sd_a:.3f}²/{self.n_seeds_a} + "
            f"{self.seed_sd_b:.3f}²/{self.n_seeds_b}) = {z:.2f} · {self.se:.4f} = {scale * self.mdd:.1f} {unit} "
            f"(two-sided α = {self.alpha:g}, power {self.power:.0%})"
        )


def _z(alpha: float, power: float) -> float:
    if not (0 < alpha < 1 and 0 < power < 1):
        raise FixableValueError(
            f"alpha={alpha}, power={power}: both must lie in (0, 1). ", "e.g. alpha=0.05, power=0.8."
        )
    return float(norm.ppf(1 - alpha / 2) + norm.ppf(power))


def planned_detectable_difference(
    item_sd: float,
    n_items: int,
    seed_sd_a: float,
    seed_sd_b: float,
    n_seeds_a: int,
    n_seeds_b: int,
    alpha: float = 0.05,
    power: float = 0.8,
) -> Power:
    """The MDD of a design from planning values (module docstring formula).

    ``item_sd`` for 0/1 scores is about ``sqrt(share of items on which the modes disagree)``.
    """
    if n_items < 1 or n_seeds_a < 1 or n_seeds_b < 1:
        raise ValueError(f"a design needs items and seeds >= 1, got {n_items} items, {n_seeds_a}/{n_seeds_b} seeds.")
    se = math.sqrt(item_sd**2 / n_items + seed_sd_a**2 / n_seeds_a + seed_sd_b**2 / n_seeds_b)
    return Power(_z(alpha, power) * se, se, item_sd, seed_sd_a, seed_sd_b, n_items, n_seeds_a, n_seeds_b, alpha, power)


def detectable_difference(a: ScoresA, b: ScoresB, alpha: float = 0.05, power: float = 0.8) -> Power:
    """The MDD of a finished comparison, from its own variance components.

    ``a`` and ``b`` are [seed, item] scores.
    """
    ta, tb = _matrix(a, "a"), _matrix(b, "b")
    if ta.shape[1] != tb.shape[1]:
        raise FixableValueError(f"detectable_difference: {ta.shape[1]} vs {tb.shape[1]} items. ", "the same items.")
    diff = ta.mean(0) - tb.mean(0)
    item_sd = float(diff.std()) if diff.numel() > 1 else 0.0
    sd_a = float(ta.mean(1).std()) if ta.shape[0] > 1 else 0.0
    sd_b = float(tb.mean(1).std()) if tb.shape[0] > 1 else 0.0
    return planned_detectable_difference(
        item_sd, ta.shape[1], sd_a, sd_b, ta.shape[0], tb.shape[0], alpha=alpha, power=power
    )
