"""Intervals and tests for every number mathcircuits reports.

A result averages something over prompt pairs or benchmark items; its uncertainty comes from which pairs and
which templates were drawn. Pairs of one template share a prefix and wording, so the templates are the units:

* :mod:`.interval` — the :class:`Interval` value with the name of its method (:data:`IntervalMethod`), the
  Wilson interval of a proportion, and :class:`Uncertainty` (resamples, level, seed: one argument);
* :mod:`.deltas` — the :class:`DeltaTable`: per model or mode and metric, the change against a baseline as an
  interval (what fine-tuning and evaluation report, and the figures and the report take);
* :mod:`.bootstrap` — percentile bootstraps over pairs, paired items, and clusters (templates);
* :mod:`.small_clusters` — the bootstrap-t over template means that covers with 4–12 templates
  (:func:`small_cluster_interval`, what the claims read) and the per-cell t-test on template means;
* :mod:`.testing` — Holm and Benjamini–Hochberg over many tests, a bias-corrected bootstrap, and where a
  measured value falls among a null's (:func:`null_placement`).

Every interval takes one :class:`Uncertainty` and draws from its own ``torch.Generator`` seeded by it.

Usage::

    from mathcircuits.stats import small_cluster_interval, wilson_interval, paired_bootstrap

    iv = small_cluster_interval(per_pair, templates, operations)   # Interval(..., method="cluster_bootstrap_t")
    iv = wilson_interval(successes=37, n=50)                         # Interval(0.74, 0.60, 0.84)
    lo, hi = bootstrap_mean(per_pair_heads, Uncertainty(n_boot=1000, seed=0))   # [layer, head] each

References: Efron & Tibshirani (1993); Wilson, JASA 22 (1927); Koehn, EMNLP 2004; Davison & Hinkley (1997);
Hall, Ann. Statist. 16 (1988); Cameron, Gelbach & Miller, REStat 90 (2008); Holm, Scand. J. Stat. 6 (1979);
Benjamini & Hochberg, JRSS B 57 (1995).
"""

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
