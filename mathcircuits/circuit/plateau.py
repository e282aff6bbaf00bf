"""The plateau and saturation rules, relative to the curve's own scale, and what an empty or negative curve means.

Absolute tolerances fail on weak curves: a tolerance of 0.05 above a curve whose maximum is 0.03 makes the
empty circuit the plateau, whatever the curve says. So both rules scale with the curve:

* **plateau**: the smallest non-empty size whose faithfulness is within ``tol = max(rel · span, PLATEAU_FLOOR)``
  of the largest, ``span`` the curve's own range (max − min over its sizes, the empty circuit included);
* **saturation** (discovery): stop when a round adds less than ``max(rel · scale, SATURATION_FLOOR)``, ``scale``
  the largest ``|F|`` reached so far;
* the floors are absolute: 0.005 of the model's behaviour for the plateau, 0.002 for a round's gain, so that a
  curve of pure noise does not split hairs.

Then the verdict (:data:`PlateauReason`): **negative** when the whole circuit's interval lies below 0 (the circuit
does worse than the counterfactual: a finding, reported with its interval) and no size beats the random band;
**empty** when no size beats the random band (its interval's low end above the band's high end; without random
draws, above 0); **plateau** otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias

from mathcircuits._errors import FixableValueError
from mathcircuits.stats import Interval

__all__ = [
    "PlateauReason",
]

#: The plateau tolerance's absolute floor (faithfulness units).
PLATEAU_FLOOR = 0.005
#: The saturation rule's absolute floor on one round's gain (faithfulness units).
SATURATION_FLOOR = 0.002
#: What the plateau says: a circuit that beats random, none that does, or a circuit worse than the counterfactual.
PlateauReason: TypeAlias = Literal["plateau", "empty", "negative"]


def find_plateau(
    sizes: Sequence[int], values: Sequence[Interval], band_high: Sequence[float], rel_tol: float
) -> tuple[int, PlateauReason, float]:
    """The plateau size, the verdict and the tolerance used (see the module docstring).

    ``sizes`` increase from 0 (the empty circuit); ``band_high`` is NaN where no random circuit was drawn
    (0 is used). Size 0 for ``"empty"`` and ``"negative"``.
    """
    if len(sizes) != len(values) or len(sizes) != len(band_high) or not sizes:
        raise FixableValueError(
            f"{len(sizes)} sizes, {len(values)} values and {len(band_high)} band ends. ", "one of each per size."
        )
    xs = [v.value for v in values]
    tol = max(rel_tol * (max(xs) - min(xs)), PLATEAU_FLOOR)
    beats = [
        n > 0 and v.low > (0.0 if b != b else b)  # NaN band: the counterfactual (0) is the null
        for n, v, b in zip(sizes, values, band_high)
    ]
    if not any(beats):
        reason: PlateauReason = "negative" if values[-1].high < 0 else "empty"
        return 0, reason, tol
    best = max(x for n, x in zip(sizes, xs) if n > 0)
    size = next(n for n, x in zip(sizes, xs) if n > 0 and x >= best - tol)
    return size, "plateau", tol


def round_saturated(faithfulness: Sequence[float], rel_tol: float) -> tuple[bool, float]:
    """Whether the last round's gain is below ``max(rel_tol · scale, SATURATION_FLOOR)``, and that threshold."""
    if len(faithfulness) < 2:
        raise FixableValueError("saturation needs two rounds. ", "call it after round 1.")
    scale = max(abs(x) for x in faithfulness)
    threshold = max(rel_tol * scale, SATURATION_FLOOR)
    return faithfulness[-1] - faithfulness[-2] < threshold, threshold
