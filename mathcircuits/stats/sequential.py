"""A sequential Monte Carlo p-value: stop drawing random sets once the verdict cannot change (Besag & Clifford 1991).

A Monte Carlo test places the observed statistic among ``n`` draws from its null; ``G`` draws are at least as
extreme, and ``p = (G + 1) / (n + 1)``. When the observed value sits in the middle of the null, the first draws
already show it: Besag and Clifford's sequential test draws until ``h`` draws have been at least as extreme, or
until ``n`` draws, and reports

* ``p = h / L`` when the ``h``-th exceedance came at draw ``L`` (it stopped early),
* ``p = (G + 1) / (n + 1)`` otherwise (it ran to ``n``): the fixed-``n`` test, value for value.

Both are valid p-values (P(p ≤ α) ≤ α under the null); the smallest either can report, the **floor**, is
``1 / (n + 1)``, the fixed test's. :func:`stop_after` picks ``h`` so that a stop decides the verdict: once it
stops, the p-value is at least ``decided_at`` whatever the remaining draws would have shown, and so would the
fixed-``n`` p-value be. A key set that beats its null therefore always gets all ``n`` draws; only a null
comparison that the key set cannot win ends early.

Usage::

    h = stop_after(n_max=100, decided_at=0.5)        # 50
    test = besag_clifford(exceeds_so_far, n_max=100, h=h)
    if test.finished: ...                            # test.p_value, test.floor, test.draws

Reference: Besag, J. & Clifford, P. (1991). Sequential Monte Carlo p-values. Biometrika 78(2), 301–304.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mathcircuits._errors import FixableValueError

__all__ = ["SequentialTest", "besag_clifford", "stop_after"]


@dataclass(frozen=True)
class SequentialTest:
    """Where a sequential Monte Carlo test stands after the draws it was given.

    ``exceedances``: draws at least as extreme as the observed statistic among the first ``draws``;
    ``n_max``: the planned draws; ``h``: the exceedances that stop it (0: never, the fixed-``n`` test).
    """

    exceedances: int
    draws: int
    n_max: int
    h: int

    @property
    def stopped_early(self) -> bool:
        """The ``h``-th exceedance came before the last planned draw."""
        return 0 < self.h <= self.exceedances and self.draws < self.n_max

    @property
    def finished(self) -> bool:
        """The test has its p-value: it stopped at the ``h``-th exceedance, or drew all ``n_max``."""
        return self.draws >= self.n_max or (0 < self.h <= self.exceedances)

    @property
    def p_value(self) -> float:
        """``h / L`` when it stopped early at the ``h``-th exceedance, else ``(G + 1) / (L + 1)`` (at ``L = n``: the
        fixed test's, also when the ``h``-th exceedance is the last draw: the larger of the two, so still valid)."""
        if self.stopped_early:
            return self.h / self.draws
        return (self.exceedances + 1) / (self.draws + 1)

    @property
    def floor(self) -> float:
        """The smallest p-value the test can report: ``1 / (n_max + 1)``."""
        return 1 / (self.n_max + 1)

    def describe(self) -> str:
        """E.g. ``"p = 0.500 (sequential: stopped after 50 of 100 draws at 50 as extreme; floor 0.010)"``."""
        how = (
            f"sequential: stopped after {self.draws} of {self.n_max} draws at {self.h} as extreme"
            if self.stopped_early
            else f"{self.draws} draws"
        )
        return f"p = {self.p_value:.3f} ({how}; floor {self.floor:.3f})"


def stop_after(n_max: int, decided_at: float) -> int:
    """The exceedances ``h`` after which a stop decides "p ≥ ``decided_at``": ``ceil(decided_at · n_max)``.

    With ``h ≥ decided_at · n_max`` both the sequential ``h / L`` (``L ≤ n_max``) and the fixed-``n`` p-value
    ``(G + 1) / (n_max + 1)`` (``G ≥ h``) are at least ``decided_at``, so stopping never changes a verdict read at
    that threshold or below it. ``decided_at`` 0 or ``n_max`` 0: 0 (never stop early).
    """
    if not 0 <= decided_at <= 1 or n_max < 0:
        raise FixableValueError(
            f"stop_after(n_max={n_max}, decided_at={decided_at}). ", "pass n_max >= 0 and decided_at in [0, 1]."
        )
    return max(0, math.ceil(decided_at * n_max - 1e-12)) if decided_at > 0 and n_max > 0 else 0


def besag_clifford(exceeds: Sequence[bool], n_max: int, h: int) -> SequentialTest:
    """The sequential test over the draws made so far, in their order (``exceeds[i]``: draw ``i`` was at least
    as extreme as the observed statistic).

    Draws after the ``h``-th exceedance or past ``n_max`` are not counted: the test stopped before them. ``h`` 0
    is the fixed-``n`` test.
    """
    if n_max < 1 or h < 0:
        raise FixableValueError(f"besag_clifford(n_max={n_max}, h={h}). ", "pass n_max >= 1 and h >= 0.")
    g = 0
    for i, e in enumerate(exceeds[:n_max]):
        g += bool(e)
        if 0 < h <= g:
            return SequentialTest(g, i + 1, n_max, h)
    return SequentialTest(g, min(len(exceeds), n_max), n_max, h)
