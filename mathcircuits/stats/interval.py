"""An interval as a value (estimate, bounds, level, method), and :class:`Uncertainty`, how a bootstrap draws.

The Wilson score interval of a proportion (Wilson 1927; Brown, Cai & DasGupta 2001),
``(p̂ + z²/2n ± z·sqrt(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n)``, covers well at small ``n`` and at 0 or 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from scipy.stats import norm

from mathcircuits._errors import FixableValueError

__all__ = [
    "Interval",
    "IntervalMethod",
    "Uncertainty",
]

DEFAULT_N_BOOT = 1000
DEFAULT_CONFIDENCE = 0.95

#: How an interval was drawn. ``cluster_bootstrap_t`` is the small-cluster method (templates resampled within
#: operations, studentized: :func:`~mathcircuits.stats.small_clusters.cluster_t_interval`);
#: ``cluster_t_few`` is the t interval on template means that replaces it below
#: :data:`~mathcircuits.stats.small_clusters.MIN_BOOTSTRAP_CLUSTERS` templates; ``pair_bootstrap_fallback`` is a
#: bootstrap over pairs where the pairs carry clusters but too few to resample (it ignores their dependence);
#: ``bootstrap`` is over rows known to be independent (or whose clusters are unknown).
IntervalMethod = Literal[
    "wilson",
    "bootstrap",
    "paired_bootstrap",
    "cluster_bootstrap",
    "cluster_bootstrap_t",
    "cluster_t_few",
    "pair_bootstrap_fallback",
    "bias_corrected_bootstrap",
    "fdr_bounds",
    "seed_item_bootstrap",
    "seed_item_t",
    "ratio_bootstrap",
    "draw_quantiles",
    "bootstrap over pairs",
    "bootstrap over templates",
    "claim",
    "none",
]

#: The words the card and the report print beside an interval of each method.
METHOD_TEXT: dict[str, str] = {
    "wilson": "Wilson",
    "bootstrap": "bootstrap over pairs",
    "paired_bootstrap": "paired bootstrap over items",
    "cluster_bootstrap": "percentile bootstrap over templates",
    "cluster_bootstrap_t": "bootstrap-t over templates",
    "cluster_t_few": "t interval on template means (fewer than 4 templates: no bootstrap)",
    "pair_bootstrap_fallback": "bootstrap over pairs (too few templates: undercovers)",
    "bias_corrected_bootstrap": "bias-corrected bootstrap over templates",
    "fdr_bounds": "bounds at a 2.5% false discovery rate over heads",
    "seed_item_bootstrap": "bootstrap over seeds and items",
    "seed_item_t": "t over seeds (seeds − 1 df) and items",
    "ratio_bootstrap": "ratio bootstrap",
    "draw_quantiles": "quantiles of random draws",
    "none": "no interval",
}


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval: ``value`` in [``low``, ``high``] at ``confidence``.

    ``n`` counts the pairs/items behind it; ``seed`` is −1 when nothing was drawn; NaN bounds mean "no data".
    """

    value: float
    low: float
    high: float
    n: int
    confidence: float = DEFAULT_CONFIDENCE
    method: IntervalMethod = "bootstrap"
    seed: int = -1

    def contains(self, x: float) -> bool:
        """Whether ``x`` lies inside [low, high] (False when the interval is NaN)."""
        return bool(self.low <= x <= self.high)

    def excludes(self, x: float) -> bool:
        """Whether the interval lies wholly on one side of ``x`` (False when it is NaN)."""
        return bool(self.high < x or self.low > x)

    @property
    def half_width(self) -> float:
        """Half the interval's width."""
        return (self.high - self.low) / 2

    @property
    def method_text(self) -> str:
        """The method in the words the card prints (``"bootstrap-t over templates"``)."""
        return METHOD_TEXT.get(self.method, self.method)

    def points(self, *, signed: bool = True) -> str:
        """The interval of a difference of fractions in percentage points (:func:`format_points`)."""
        return format_points(self.value, self.low, self.high, signed=signed)

    def format(self, fmt: str = "{:.3f}") -> str:
        """``"0.740 [0.610, 0.840]"``; ``"n/a"`` when the value is NaN."""
        if math.isnan(self.value):
            return "n/a"
        return f"{fmt.format(self.value)} [{fmt.format(self.low)}, {fmt.format(self.high)}]"


def _pt(x: float, signed: bool) -> str:
    p = 100 * x
    digits = 0 if abs(p) >= 99.95 else 1  # 2-3 significant digits between 1 and 100 points
    return f"{p:+.{digits}f}" if signed else f"{p:.{digits}f}"


def format_points(
    value: float, low: float = math.nan, high: float = math.nan, *, signed: bool = True, unit: str = "points"
) -> str:
    """A difference of fractions in percentage points, with its unit: ``"+75.6 points [+70.6, +79.8]"``.

    ``value`` is a fraction (0.756 is 75.6 points); NaN ``low``: no interval shown; ``signed=False`` for levels such
    as an accuracy. ``"n/a"`` when ``value`` is NaN.
    """
    if value is None or math.isnan(value):
        return "n/a"
    text = f"{_pt(value, signed)} {unit}"
    if math.isnan(low) or math.isnan(high):
        return text
    return f"{text} [{_pt(low, signed)}, {_pt(high, signed)}]"


def format_share(share: float) -> str:
    """A share of a total as a positive percentage with 2 significant digits and its direction in words.

    ``-0.173`` gives ``"17% of it, in the opposite direction"``; ``0.5`` ``"50% of it"``.
    """
    if math.isnan(share):
        return "an undefined share of it"
    p = 100 * abs(share)
    size = f"{p:.0f}%" if p >= 10 else f"{p:.2g}%"
    return f"{size} of it" + (", in the opposite direction" if share < 0 else "")


def check_level(confidence: float, n_boot: int) -> None:
    """Refuse a level outside (0, 1) or fewer than one resample."""
    if not 0.0 < confidence < 1.0:
        raise FixableValueError(f"confidence={confidence} is not in (0, 1). ", "pass e.g. confidence=0.95.")
    if n_boot < 1:
        raise FixableValueError(f"n_boot={n_boot} must be at least 1. ", "pass e.g. n_boot=1000.")


@dataclass(frozen=True)
class Uncertainty:
    """How a bootstrap interval is drawn: ``n_boot`` resamples from ``seed``, read at level ``confidence``.

    A function that also draws a null (shuffles, random sets) from the same seed says so.
    """

    n_boot: int = DEFAULT_N_BOOT
    confidence: float = DEFAULT_CONFIDENCE
    seed: int = 0

    def __post_init__(self) -> None:
        check_level(self.confidence, self.n_boot)


#: 1000 resamples, 95%, seed 0.
DEFAULT_UNCERTAINTY = Uncertainty()


def z_value(confidence: float) -> float:
    """The two-sided normal quantile of ``confidence``."""
    return float(norm.ppf(0.5 + confidence / 2))


def wilson_interval(successes: int, n: int, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Wilson score interval of the proportion ``successes / n`` (``method="wilson"``; ``n=0`` gives NaN)."""
    check_level(confidence, 1)
    successes, n = int(successes), int(n)
    if n < 0 or not 0 <= successes <= max(n, 0):
        raise FixableValueError(
            f"wilson_interval got successes={successes}, n={n}; need 0 ≤ successes ≤ n. ",
            "pass the count of correct items and the number of items.",
        )
    if n == 0:
        nan = float("nan")
        return Interval(nan, nan, nan, 0, confidence, "wilson")
    z = z_value(confidence)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n, confidence, "wilson")
