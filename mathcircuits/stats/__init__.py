"""Intervals and tests for every number mathcircuits reports.

Pairs of one template share a prefix and wording, so the templates are the units of replication. The
:class:`Interval` names its method; :class:`Uncertainty` (resamples, level, seed) is passed as one argument, and
every interval draws from its own ``torch.Generator`` seeded by it. :func:`small_cluster_interval` (bootstrap-t
over template means, covers with 4–12 templates) is what the claims read.

Example::

    iv = small_cluster_interval(per_pair, templates, operations)   # Interval(..., method="cluster_bootstrap_t")
    iv = wilson_interval(successes=37, n=50)                         # Interval(0.74, 0.60, 0.84)

References: Efron & Tibshirani (1993); Wilson, JASA 22 (1927); Koehn, EMNLP 2004; Davison & Hinkley (1997);
Hall, Ann. Statist. 16 (1988); Cameron, Gelbach & Miller, REStat 90 (2008); Holm, Scand. J. Stat. 6 (1979);
Benjamini & Hochberg, JRSS B 57 (1995).
"""

from mathcircuits._checks import check_exports
from mathcircuits.stats.bootstrap import (
    MIN_CLUSTERS,
    bootstrap_indices,
    bootstrap_mean,
    bootstrap_statistic,
    cluster_bootstrap,
    cluster_bootstrap_indices,
    cluster_bootstrap_mean,
    mean_interval,
    paired_bootstrap,
)
from mathcircuits.stats.deltas import DeltaTable, Extra, no_interval
from mathcircuits.stats.interval import (
    DEFAULT_CONFIDENCE,
    DEFAULT_N_BOOT,
    DEFAULT_UNCERTAINTY,
    METHOD_TEXT,
    Interval,
    IntervalMethod,
    Uncertainty,
    format_points,
    format_share,
    wilson_interval,
)
from mathcircuits.stats.small_clusters import (
    ClusterMeans,
    cluster_means,
    cluster_t_interval,
    cluster_t_test,
    small_cluster_interval,
)
from mathcircuits.stats.testing import (
    NullPlacement,
    benjamini_hochberg,
    bias_corrected_bootstrap,
    holm,
    null_placement,
)

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_N_BOOT",
    "DEFAULT_UNCERTAINTY",
    "METHOD_TEXT",
    "MIN_CLUSTERS",
    "ClusterMeans",
    "DeltaTable",
    "Extra",
    "Interval",
    "IntervalMethod",
    "NullPlacement",
    "Uncertainty",
    "benjamini_hochberg",
    "bias_corrected_bootstrap",
    "bootstrap_indices",
    "bootstrap_mean",
    "bootstrap_statistic",
    "cluster_bootstrap",
    "cluster_bootstrap_indices",
    "cluster_bootstrap_mean",
    "cluster_means",
    "cluster_t_interval",
    "cluster_t_test",
    "format_points",
    "format_share",
    "holm",
    "mean_interval",
    "no_interval",
    "null_placement",
    "paired_bootstrap",
    "small_cluster_interval",
    "wilson_interval",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
