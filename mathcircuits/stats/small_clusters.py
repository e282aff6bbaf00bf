"""Intervals and tests that hold with few clusters: the studentized (bootstrap-t) bootstrap over template means.

Why. The template is the unit of replication, and a run has 3–12 per operation. With so few, the percentile
bootstrap over templates covers 0.77 (4 templates) to 0.87 (12) at a nominal 0.95, and a t interval on template
means 0.89–0.93 when their spread is skewed (tests/test_coverage.py; Cameron, Gelbach & Miller 2008).

Method (Hall 1988; Davison & Hinkley 1997, §5.2.1). Average each cluster's rows, ``ȳ_g``. Within each stratum
``s`` (operation) take the mean ``m_s`` of its ``G_s`` cluster means and its variance ``v_s = var(ȳ_g)/G_s``;
the estimate is ``θ = Σ w_s m_s`` (``w_s`` the stratum's share of rows) with ``se² = Σ w_s² v_s``. Resample
clusters within strata, recompute ``t* = (θ* − θ)/se*``; the interval is ``[θ − q̂_{1−α/2} se, θ − q̂_{α/2} se]``
with ``q̂`` the quantiles of ``t*`` (resamples with ``se* = 0`` left out). Studentizing corrects the skew the
t interval misses; templates weigh equally, so a large one does not dominate.

:func:`cluster_t_test` gives each cell's p-value from the same quantities with a Welch–Satterthwaite ``t``
(``G − 1`` degrees of freedom with one stratum).

Limits. Below :data:`MIN_BOOTSTRAP_CLUSTERS` clusters the bootstrap-t cannot be drawn: 2 clusters give 4 resamples,
half of them with ``se* = 0``, and the interval collapsed to θ; 3 covered 0.80. There
:func:`small_cluster_interval` falls back to the t interval on cluster means, ``θ ± t_{df, 1−α/2} · se`` (exact for
normal cluster means; ``cluster_t_few``, named on the card), wide as it should be with 1–2 degrees of freedom.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Float
from scipy.stats import t as student_t
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.stats.bootstrap import bootstrap_statistic
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY, Interval, Uncertainty

__all__: list[str] = []

MIN_BOOTSTRAP_CLUSTERS = 4  # fewer clusters: the t interval on cluster means instead of the bootstrap-t


class ClusterMeans:
    """Per-cluster means of rows [cluster, cell], each cluster's stratum, and each stratum's weight (share of rows)."""

    def __init__(self, means: Tensor, stratum: Tensor, weights: Tensor, n_rows: int) -> None:
        self.means, self.stratum, self.weights, self.n_rows = means, stratum, weights, n_rows

    @property
    def n_clusters(self) -> int:
        return int(self.means.shape[0])

    def sizes(self) -> list[int]:
        """Clusters per stratum."""
        return [int((self.stratum == s).sum()) for s in range(len(self.weights))]

    def resample(self, n_boot: int, seed: int) -> Tensor:
        """Cluster indices of ``n_boot`` resamples [resample, cluster], each cluster drawn within its stratum."""
        gen = torch.Generator().manual_seed(int(seed))
        idx = torch.empty(n_boot, self.n_clusters, dtype=torch.long)
        for s in range(len(self.weights)):
            members = torch.nonzero(self.stratum == s).flatten()
            idx[:, members] = members[torch.randint(0, len(members), (n_boot, len(members)), generator=gen)]
        return idx

    def estimate(self, means: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``(θ, se, df)`` per cell from cluster means ``[..., cluster, cell]`` (default: the observed ones)."""
        m = self.means if means is None else means
        theta = torch.zeros(m.shape[:-2] + m.shape[-1:], dtype=m.dtype)
        var = torch.zeros_like(theta)
        df_den = torch.zeros_like(theta)
        for s, w in enumerate(self.weights.tolist()):
            ms = m[..., self.stratum == s, :]
            g = ms.shape[-2]
            theta += w * ms.mean(-2)
            v = w * w * ms.var(-2, unbiased=True) / g
            var += v
            df_den += v * v / (g - 1)
        df = torch.where(df_den > 0, var * var / df_den.clamp(min=1e-300), torch.ones_like(var))
        return theta, var.sqrt(), df


def cluster_means(
    values: Float[Tensor, "row ..."] | Sequence[float],
    clusters: Sequence[object],
    strata: Sequence[object] | None = None,
) -> ClusterMeans:
    """Average rows per cluster (NaN-free values), nest clusters in strata, weigh strata by their rows.

    Each cluster must lie in one stratum, each stratum needs two clusters.
    """
    x = torch.as_tensor(values, dtype=torch.float64)
    n = len(clusters)
    if x.ndim == 0 or x.shape[0] != n or n == 0:
        raise FixableValueError(
            f"got values of shape {tuple(x.shape)} for {n} cluster labels. ", "pass one row per cluster label."
        )
    strata = list(strata) if strata is not None else [0] * n
    if len(strata) != n:
        raise FixableValueError(f"got {len(strata)} strata labels for {n} rows. ", "pass one stratum label per row.")
    flat = x.reshape(n, -1)
    ids: dict[object, int] = {}
    home: dict[object, object] = {}
    for c, s in zip(clusters, strata):
        if home.setdefault(c, s) != s:
            raise FixableValueError(
                f"cluster {c!r} has rows in strata {home[c]!r} and {s!r}. ",
                "nest clusters in strata (e.g. template ids within operations).",
            )
        ids.setdefault(c, len(ids))
    row_c = torch.tensor([ids[c] for c in clusters])
    sums = torch.zeros(len(ids), flat.shape[1], dtype=torch.float64).index_add_(0, row_c, flat)
    counts = torch.bincount(row_c, minlength=len(ids)).double()
    s_ids = {s: i for i, s in enumerate(dict.fromkeys(strata))}
    stratum = torch.tensor([s_ids[home[c]] for c in ids])
    rows = torch.bincount(torch.tensor([s_ids[s] for s in strata]), minlength=len(s_ids)).double()
    small = [str(s) for s, i in s_ids.items() if int((stratum == i).sum()) < 2]
    if small:
        raise FixableValueError(
            f"strata {small} have fewer than two clusters, so the variation between clusters cannot be estimated. ",
            "use rows from several templates per operation, or pass strata=None.",
        )
    return ClusterMeans(sums / counts[:, None], stratum, rows / rows.sum(), n)


def cluster_t_interval(
    values: Float[Tensor, "row ..."] | Sequence[float],
    clusters: Sequence[object],
    strata: Sequence[object] | None = None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> tuple[Float[Tensor, "..."], Float[Tensor, "..."], Float[Tensor, "..."]]:
    """Bootstrap-t interval of the mean of template means, for every cell at once (module docstring).

    ``values`` [row, ...] without NaN; each stratum needs two clusters; returns ``(value, low, high)`` like a row.
    """
    x = torch.as_tensor(values, dtype=torch.float64)
    cm = cluster_means(x, clusters, strata)
    theta, se, _ = cm.estimate()
    idx = cm.resample(uncertainty.n_boot, uncertainty.seed)
    ts = []
    for chunk in idx.split(max(1, 4_000_000 // max(1, cm.n_clusters * cm.means.shape[1])), dim=0):
        th, s, _ = cm.estimate(cm.means[chunk])  # the resampled clusters keep their strata (drawn within them)
        ts.append(torch.where(s > 1e-12 * (1 + th.abs()), (th - theta) / s, torch.full_like(th, float("nan"))))
    a = 1 - uncertainty.confidence
    q = torch.nanquantile(torch.cat(ts), torch.tensor([a / 2, 1 - a / 2], dtype=torch.float64), dim=0)
    q = torch.nan_to_num(q, nan=0.0)  # every resample degenerate: the template means agree, the interval is θ
    low, high = theta - q[1] * se, theta - q[0] * se
    shape = x.shape[1:]
    return theta.reshape(shape), low.reshape(shape), high.reshape(shape)


def cluster_t_few(
    values: Float[Tensor, "row ..."] | Sequence[float],
    clusters: Sequence[object],
    strata: Sequence[object] | None = None,
    confidence: float = DEFAULT_UNCERTAINTY.confidence,
) -> tuple[Float[Tensor, "..."], Float[Tensor, "..."], Float[Tensor, "..."]]:
    """The t interval on cluster means, ``θ ± t_{df, 1−α/2} · se`` (Welch–Satterthwaite ``df``), for every cell.

    What :func:`small_cluster_interval` uses below :data:`MIN_BOOTSTRAP_CLUSTERS` clusters; returns
    ``(value, low, high)``.
    """
    x = torch.as_tensor(values, dtype=torch.float64)
    theta, se, df = cluster_means(x, clusters, strata).estimate()
    q = torch.as_tensor(student_t.ppf(0.5 + confidence / 2, df.numpy()), dtype=torch.float64)
    shape = x.shape[1:]
    return theta.reshape(shape), (theta - q * se).reshape(shape), (theta + q * se).reshape(shape)


def cluster_t_test(
    values: Float[Tensor, "row ..."],
    clusters: Sequence[object],
    strata: Sequence[object] | None = None,
    null: float | Tensor = 0.0,
    alternative: str = "two-sided",
) -> tuple[Float[Tensor, "..."], Float[Tensor, "..."]]:
    """Each cell's t-test of its mean of template means against ``null``, templates as units.

    Pass the row index as ``clusters`` when rows are independent. ``alternative="greater"`` tests mean > null.
    Returns ``(estimate, p)`` shaped like one row; a cell whose template means all agree has p 0 (or 1) unless its
    estimate equals the null.
    """
    x = torch.as_tensor(values, dtype=torch.float64)
    cm = cluster_means(x, clusters, strata)
    theta, se, df = cm.estimate()
    diff = theta - torch.as_tensor(null, dtype=torch.float64).reshape(-1) if torch.is_tensor(null) else theta - null
    t = torch.where(se > 0, diff / se.clamp(min=1e-300), diff.sign() * float("inf"))
    t = torch.nan_to_num(t, nan=0.0)
    sf = torch.as_tensor(student_t.sf(t.numpy(), df.numpy()), dtype=torch.float64)
    cdf = torch.as_tensor(student_t.cdf(t.numpy(), df.numpy()), dtype=torch.float64)
    p = {"two-sided": 2 * torch.minimum(sf, cdf), "greater": sf, "less": cdf}[alternative].clamp(max=1.0)
    return theta.reshape(x.shape[1:]), p.reshape(x.shape[1:])


def small_cluster_interval(
    values: Sequence[float] | Tensor,
    clusters: Sequence[object] | None,
    strata: Sequence[object] | None = None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> Interval:
    """The interval of a per-row mean that every claim reads: bootstrap-t over templates where it can be drawn.

    With two or more clusters in every stratum: :func:`cluster_t_interval` within strata; with two or more in
    all but not in every stratum: the same over all clusters (strata ignored, wider when strata differ); with 2 or
    3 clusters in all: :func:`cluster_t_few`, the t interval on cluster means (``cluster_t_few``); with
    one cluster, or no cluster labels, the percentile bootstrap over rows, named ``pair_bootstrap_fallback``
    when the rows carry cluster labels (it ignores their dependence and undercovers) and ``bootstrap`` when not.
    """
    confidence, seed = uncertainty.confidence, uncertainty.seed
    x = torch.as_tensor(values, dtype=torch.float64)
    if x.ndim != 1 or x.numel() == 0:
        nan = float("nan")
        return Interval(nan, nan, nan, 0, confidence, "none", seed)
    if clusters is not None and len(set(clusters)) >= 2:
        per: dict[object, set[object]] = {}
        for c, s in zip(clusters, strata if strata is not None else [0] * len(clusters)):
            per.setdefault(s, set()).add(c)
        use = strata if all(len(cs) >= 2 for cs in per.values()) else None
        use = None if use is None else list(use)
        if len(set(clusters)) < MIN_BOOTSTRAP_CLUSTERS:
            v, lo, hi = cluster_t_few(x, list(clusters), use, confidence)
            return Interval(float(v), float(lo), float(hi), int(x.numel()), confidence, "cluster_t_few", -1)
        v, lo, hi = cluster_t_interval(x, list(clusters), use, uncertainty)
        return Interval(float(v), float(lo), float(hi), int(x.numel()), confidence, "cluster_bootstrap_t", seed)
    iv = bootstrap_statistic(x, None, uncertainty)
    method = "pair_bootstrap_fallback" if clusters is not None else "bootstrap"
    return Interval(iv.value, iv.low, iv.high, iv.n, confidence, method, seed)
