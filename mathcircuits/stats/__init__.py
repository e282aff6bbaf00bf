"""Intervals and tests for every number mathcircuits reports.

Pairs of one template share a prefix and wording, so the templates are the units of replication. The
:class:`Interval` names its method; :class:`Uncertainty` (resamples, level, seed) is passed as one argument, and
every interval draws from its own ``torch.Generator`` seeded by it.
:func:`~.small_clusters.small_cluster_interval` (bootstrap-t over template means, covers with 4–12 templates) is
what the claims read.

Example (the interval functions are imported from their modules)::

    from mathcircuits.stats.interval import wilson_interval
    from mathcircuits.stats.small_clusters import small_cluster_interval

    iv = small_cluster_interval(per_pair, templates, operations)   # Interval(..., method="cluster_bootstrap_t")
    iv = wilson_interval(successes=37, n=50)                         # Interval(0.74, 0.60, 0.84)

References: Efron & Tibshirani (1993); Wilson, JASA 22 (1927); Koehn, EMNLP 2004; Davison & Hinkley (1997);
Hall, Ann. Statist. 16 (1988); Cameron, Gelbach & Miller, REStat 90 (2008); Holm, Scand. J. Stat. 6 (1979);
Benjamini & Hochberg, JRSS B 57 (1995).
"""

from mathcircuits._checks import check_exports
from mathcircuits.stats.deltas import DeltaTable, Extra
from mathcircuits.stats.interval import Interval, IntervalMethod, Uncertainty
from mathcircuits.stats.sequential import SequentialTest, besag_clifford, stop_after

__all__ = [
    "DeltaTable",
    "Extra",
    "Interval",
    "IntervalMethod",
    "SequentialTest",
    "Uncertainty",
    "besag_clifford",
    "stop_after",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
