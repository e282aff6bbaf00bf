"""Bootstrap intervals with the percentile method: over rows, paired, and over clusters (templates).

* **Mean** (Efron & Tibshirani 1993, ch. 13): resample rows, the interval is the ``(α/2, 1 − α/2)`` quantiles
  of the resample means; one interval per cell of a tensor; NaN rows are ignored per cell.
* **Paired difference** (Koehn 2004): resample the shared items, recompute ``mean(a) − mean(b)`` on each, so
  item difficulty cancels.
* **Cluster** (Davison & Hinkley 1997, §3.8; Field & Welsh 2007): resample whole templates within each operation.
  With few clusters its percentile interval undercovers (0.77 at 4 templates, 0.88 at 12 in
  tests/test_coverage.py); :mod:`.small_clusters` has the interval that covers there.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.stats.interval import (
    DEFAULT_CONFIDENCE,
    DEFAULT_N_BOOT,
    DEFAULT_UNCERTAINTY,
    Interval,
    IntervalMethod,
    Uncertainty,
    check_level,
)

__all__: list[str] = []


def bootstrap_indices(n: int, n_boot: int = DEFAULT_N_BOOT, seed: int = 0) -> torch.Tensor:
    """Row indices [n_boot, n] of ``n_boot`` bootstrap resamples of ``n`` rows, drawn with replacement."""
    check_level(DEFAULT_CONFIDENCE, n_boot)
    if n < 1:
        raise FixableValueError(f"cannot bootstrap {n} rows. ", "pass at least one pair/item.")
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randint(0, n, (n_boot, n), generator=gen)


def _quantiles(stats: Tensor, confidence: float) -> tuple[Tensor, Tensor]:
    alpha = 1 - confidence
    q = torch.tensor([alpha / 2, 1 - alpha / 2], dtype=stats.dtype)
    out = torch.nanquantile(stats, q, dim=0)
    return out[0], out[1]


def bootstrap_mean(
    values: Float[Tensor, "row ..."] | Sequence[float],
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> tuple[Float[Tensor, "..."], Float[Tensor, "..."]]:
    """Percentile-bootstrap interval of the mean over the first axis, for every cell at once.

    ``values`` is [row, ...] (e.g. per-pair effects [pair, layer, head]); NaN entries are left out of their cell's
    mean. Returns ``(low, high)``, each shaped like one row; a cell with no finite value is NaN.
    """
    x = torch.as_tensor(values, dtype=torch.float64)
    if x.ndim == 0 or x.shape[0] == 0:
        raise FixableValueError(
            f"bootstrap_mean needs at least one row, got shape {tuple(x.shape)}. ", "pass [row, ...]."
        )
    idx = bootstrap_indices(x.shape[0], uncertainty.n_boot, uncertainty.seed)
    flat = x.reshape(x.shape[0], -1)
    means = []
    for chunk in idx.split(max(1, 2_000_000 // max(1, flat.numel())), dim=0):
        means.append(flat[chunk].nanmean(dim=1))  # [chunk, cells]
    low, high = _quantiles(torch.cat(means), uncertainty.confidence)
    shape = x.shape[1:]
    return low.reshape(shape).float(), high.reshape(shape).float()


def bootstrap_statistic(
    values: Sequence[float] | Tensor,
    statistic=None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> Interval:
    """Percentile-bootstrap interval of a scalar statistic of one sample (default: the mean over rows)."""
    n_boot, confidence, seed = uncertainty.n_boot, uncertainty.confidence, uncertainty.seed
    x = torch.as_tensor(values, dtype=torch.float64)
    if x.ndim == 0 or x.shape[0] == 0:
        nan = float("nan")
        return Interval(nan, nan, nan, 0, confidence, "bootstrap", seed)
    stat = statistic or (lambda t: float(t.mean()))
    boots = torch.tensor([stat(x[i]) for i in bootstrap_indices(x.shape[0], n_boot, seed)], dtype=torch.float64)
    low, high = _quantiles(boots, confidence)
    return Interval(float(stat(x)), float(low), float(high), int(x.shape[0]), confidence, "bootstrap", seed)


def paired_bootstrap(
    a: Sequence[float] | Tensor,
    b: Sequence[float] | Tensor,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> Interval:
    """Paired-bootstrap interval of ``mean(a) − mean(b)`` over the same items, in the same order in ``a`` and ``b``."""
    ta, tb = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    if ta.shape != tb.shape or ta.ndim != 1:
        raise FixableValueError(
            f"paired_bootstrap needs two 1-D score vectors over the same items, got shapes "
            f"{tuple(ta.shape)} and {tuple(tb.shape)}. ",
            "score both models on the same items, in the same order.",
        )
    iv = bootstrap_statistic(ta - tb, None, uncertainty)
    return Interval(iv.value, iv.low, iv.high, iv.n, iv.confidence, "paired_bootstrap", iv.seed)


def cluster_bootstrap_indices(
    clusters: Sequence[object],
    strata: Sequence[object] | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> list[Tensor]:
    """Row indices of ``n_boot`` cluster-bootstrap resamples (whole clusters drawn with replacement per stratum).

    Each cluster must lie in one stratum, and each stratum needs two clusters (else its between-cluster variation
    cannot be estimated); ``strata=None`` is one stratum. The resamples' lengths vary with the drawn clusters' sizes.
    """
    check_level(DEFAULT_CONFIDENCE, n_boot)
    n = len(clusters)
    strata = list(strata) if strata is not None else [0] * n
    if n == 0 or len(strata) != n:
        raise FixableValueError(
            f"cluster_bootstrap got {n} cluster labels and {len(strata)} strata labels. ",
            "pass one cluster (and stratum) label per row, at least one row.",
        )
    members: dict[object, dict[object, list[int]]] = {}
    home: dict[object, object] = {}
    for i, (c, s) in enumerate(zip(clusters, strata)):
        if home.setdefault(c, s) != s:
            raise FixableValueError(
                f"cluster {c!r} has rows in strata {home[c]!r} and {s!r}. ",
                "nest clusters in strata (e.g. template ids within operations).",
            )
        members.setdefault(s, {}).setdefault(c, []).append(i)
    small = {s: len(cs) for s, cs in members.items() if len(cs) < 2}
    if small:
        raise FixableValueError(
            f"strata {sorted(map(str, small))} have fewer than two clusters, so the variation between clusters "
            "cannot be estimated. ",
            "use rows from several templates, or bootstrap over pairs (bootstrap_statistic).",
        )
    gen = torch.Generator().manual_seed(int(seed))
    groups = [[torch.tensor(rows) for rows in cs.values()] for cs in members.values()]
    out = []
    for _ in range(n_boot):
        drawn = []
        for cs in groups:
            pick = torch.randint(0, len(cs), (len(cs),), generator=gen)
            drawn += [cs[int(j)] for j in pick]
        out.append(torch.cat(drawn))
    return out


def cluster_bootstrap(
    values: Sequence[float] | Tensor,
    clusters: Sequence[object],
    statistic=None,
    strata: Sequence[object] | None = None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> Interval:
    """Percentile interval of a scalar statistic, resampling whole clusters (templates) within strata (operations)."""
    n_boot, confidence, seed = uncertainty.n_boot, uncertainty.confidence, uncertainty.seed
    x = torch.as_tensor(values, dtype=torch.float64)
    if x.ndim == 0 or x.shape[0] != len(clusters):
        raise FixableValueError(
            f"cluster_bootstrap got {tuple(x.shape)} values for {len(clusters)} cluster labels. ",
            "pass one row of values per cluster label.",
        )
    stat = statistic or (lambda t: float(t.mean()))
    boots = torch.tensor([stat(x[i]) for i in cluster_bootstrap_indices(clusters, strata, n_boot, seed)])
    low, high = _quantiles(boots.double(), confidence)
    return Interval(float(stat(x)), float(low), float(high), int(x.shape[0]), confidence, "cluster_bootstrap", seed)


def cluster_bootstrap_mean(
    values: Float[Tensor, "row ..."],
    clusters: Sequence[object],
    strata: Sequence[object] | None = None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    divide_by: Float[Tensor, " row"] | None = None,
) -> tuple[Float[Tensor, "..."], Float[Tensor, "..."]]:
    """Cluster-bootstrap interval of the mean over the first axis, for every cell at once.

    The tensor form of :func:`cluster_bootstrap` (NaN entries left out of their cell). With ``divide_by`` [row], the
    interval is that of ``mean(values) / |mean(divide_by)|`` on each resample (a ratio of means, e.g. a head's effect
    as a share of the total effect).
    """
    x = torch.as_tensor(values, dtype=torch.float64)
    if x.ndim == 0 or x.shape[0] != len(clusters):
        raise FixableValueError(
            f"cluster_bootstrap_mean got values of shape {tuple(x.shape)} for {len(clusters)} cluster labels. ",
            "pass one row of values per cluster label.",
        )
    flat = x.reshape(x.shape[0], -1)
    den = None if divide_by is None else torch.as_tensor(divide_by, dtype=torch.float64)
    means = []
    for idx in cluster_bootstrap_indices(clusters, strata, uncertainty.n_boot, uncertainty.seed):
        m = flat[idx].nanmean(dim=0)
        means.append(m if den is None else m / den[idx].nanmean().abs())
    low, high = _quantiles(torch.stack(means), uncertainty.confidence)
    return low.reshape(x.shape[1:]).float(), high.reshape(x.shape[1:]).float()


#: the fewest clusters per stratum for :func:`mean_interval` to resample clusters: a percentile bootstrap over
#: two or three clusters covers far below its nominal level (72% instead of 95% on three templates in
#: tests/test_claims.py's coverage test), so with fewer it resamples rows and says so.
MIN_CLUSTERS = 5


def mean_interval(
    values: Float[Tensor, "row ..."],
    clusters: Sequence[object] | None = None,
    strata: Sequence[object] | None = None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> tuple[Float[Tensor, "..."], Float[Tensor, "..."], IntervalMethod]:
    """The interval of per-row means that every analysis should use: over clusters when it can, else over rows.

    Rows of one template are not independent: with clusters given and :data:`MIN_CLUSTERS` in every stratum this is
    :func:`cluster_bootstrap_mean`, else :func:`bootstrap_mean`. The returned method says which:
    ``"cluster_bootstrap"``, ``"pair_bootstrap_fallback"`` (too few templates: it ignores their dependence) or
    ``"bootstrap"`` (no templates given).
    """
    if clusters is not None and len(clusters) == len(values):
        groups: dict[object, set[object]] = {}
        for c, s in zip(clusters, strata if strata is not None else [0] * len(clusters)):
            groups.setdefault(s, set()).add(c)
        if all(len(cs) >= MIN_CLUSTERS for cs in groups.values()):
            lo, hi = cluster_bootstrap_mean(values, clusters, strata, uncertainty)
            return lo, hi, "cluster_bootstrap"
    lo, hi = bootstrap_mean(values, uncertainty)
    return lo, hi, "pair_bootstrap_fallback" if clusters is not None else "bootstrap"
