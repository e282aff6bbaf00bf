"""Intervals cover known truths at about their nominal rate; estimators refuse bad input."""

import pytest
import torch

from mathcircuits.stats import Uncertainty
from mathcircuits.stats.bootstrap import (
    bootstrap_indices,
    bootstrap_mean,
    bootstrap_statistic,
    cluster_bootstrap,
    cluster_bootstrap_indices,
    paired_bootstrap,
)
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY, wilson_interval

from helpers import binomial_band, coverage

N_SIMS = 300


def test_wilson_matches_known_values_and_edges():
    iv = wilson_interval(37, 50)
    # Reference values (Wilson 1927 formula, z=1.95996): [0.6039, 0.8411]
    assert iv.low == pytest.approx(0.6039, abs=1e-3) and iv.high == pytest.approx(0.8411, abs=1e-3)
    zero = wilson_interval(0, 20)
    assert zero.low == 0.0 and zero.high > 0.1  # not the degenerate [0, 0] of the normal interval
    assert wilson_interval(0, 0).format() == "n/a"
    with pytest.raises(ValueError, match="Fix:"):
        wilson_interval(5, 3)


def test_wilson_coverage_at_nominal_rate():
    gen = torch.Generator().manual_seed(1)
    p, n = 0.3, 40
    ks = torch.binomial(torch.full((N_SIMS,), float(n)), torch.full((N_SIMS,), p), generator=gen)
    ivs = [wilson_interval(int(k), n) for k in ks]
    cov = coverage([i.low for i in ivs], [i.high for i in ivs], p)
    lo, hi = binomial_band(0.95, N_SIMS)
    assert lo <= cov <= hi, cov


def test_bootstrap_mean_coverage_per_cell():
    # Per-pair "effects" with known means per cell: bootstrap over rows must cover each at ~95%.
    gen = torch.Generator().manual_seed(2)
    truth = torch.tensor([[-0.5, 0.0], [0.2, 1.0]])
    los, his = [], []
    for s in range(N_SIMS):
        x = truth + torch.randn(60, 2, 2, generator=gen)
        lo, hi = bootstrap_mean(x, uncertainty=Uncertainty(n_boot=300, seed=s))
        assert lo.shape == (2, 2)
        los.append(lo)
        his.append(hi)
    lo, hi = torch.stack(los), torch.stack(his)
    cov = ((lo <= truth) & (truth <= hi)).double().mean().item()
    band = binomial_band(0.95, N_SIMS * 4)
    # percentile bootstrap under-covers slightly at n=60; allow 2 points below the band
    assert band[0] - 0.02 <= cov <= band[1], cov


def test_bootstrap_is_seeded_and_ignores_nan_rows():
    x = torch.randn(30, 3)
    assert torch.equal(bootstrap_indices(30, 10, seed=5), bootstrap_indices(30, 10, seed=5))
    assert not torch.equal(bootstrap_indices(30, 10, seed=5), bootstrap_indices(30, 10, seed=6))
    x[:, 2] = float("nan")
    lo, hi = bootstrap_mean(x, uncertainty=Uncertainty(n_boot=200, seed=0))
    assert torch.isnan(lo[2]) and torch.isfinite(lo[:2]).all() and (lo[:2] <= hi[:2]).all()


def test_paired_bootstrap_cancels_item_difficulty():
    gen = torch.Generator().manual_seed(3)
    difficulty = torch.rand(200, generator=gen)
    a = (difficulty < 0.7).double()  # A solves every item B solves, plus 10% more
    b = (difficulty < 0.6).double()
    d = paired_bootstrap(a, b, uncertainty=Uncertainty(n_boot=500, seed=0))
    assert d.value == pytest.approx(float(a.mean() - b.mean()))
    assert d.excludes(0.0)
    unpaired = bootstrap_statistic(a, uncertainty=Uncertainty(n_boot=500, seed=0))
    assert d.half_width < unpaired.half_width  # pairing removes item variance
    with pytest.raises(ValueError, match="same items"):
        paired_bootstrap(a, b[:-1])


def test_cluster_bootstrap_resamples_whole_clusters_within_strata():
    # 6 templates whose pairs share a template offset: pairs look independent, clusters do not
    gen = torch.Generator().manual_seed(0)
    offsets = torch.tensor([-2.0, -1.0, 0.0, 0.5, 1.5, 3.0])
    clusters = [t for t in range(6) for _ in range(20)]
    values = offsets[clusters] + 0.1 * torch.randn(120, generator=gen)
    over_pairs = bootstrap_statistic(values, uncertainty=Uncertainty(n_boot=500, seed=1))
    over_templates = cluster_bootstrap(values, clusters, uncertainty=Uncertainty(n_boot=500, seed=1))
    assert over_templates.method == "cluster_bootstrap" and over_templates.value == pytest.approx(float(values.mean()))
    assert over_templates.half_width > 3 * over_pairs.half_width, "between-template variation widens the interval"
    strata = ["add" if t < 3 else "mul" for t in clusters]
    for idx in cluster_bootstrap_indices(clusters, strata, n_boot=50, seed=2):
        drawn = [clusters[i] for i in idx.tolist()]
        assert sum(c < 3 for c in drawn) == 60 and sum(c >= 3 for c in drawn) == 60, "three clusters per stratum"
        assert all(drawn.count(c) % 20 == 0 for c in set(drawn)), "a cluster comes whole"
    with pytest.raises(ValueError, match="fewer than two clusters.*Fix"):
        cluster_bootstrap(values[:20], clusters[:20])
    with pytest.raises(ValueError, match="has rows in strata.*Fix"):
        cluster_bootstrap_indices([0, 0, 1, 1], ["a", "b", "a", "a"])


def test_uncertainty_is_one_checked_value_that_draws_the_same_interval():
    u = Uncertainty(n_boot=300, confidence=0.9, seed=4)
    x = torch.randn(50, generator=torch.Generator().manual_seed(3))
    iv = bootstrap_statistic(x, uncertainty=u)
    assert (iv.confidence, iv.seed) == (0.9, 4)
    assert iv == bootstrap_statistic(x, uncertainty=Uncertainty(300, 0.9, 4)), "same settings, same interval"
    assert iv != bootstrap_statistic(x, uncertainty=Uncertainty(300, 0.9, 5)), "the seed draws the resamples"
    assert bootstrap_statistic(x, uncertainty=Uncertainty(300, 0.5, 4)).half_width < iv.half_width
    assert DEFAULT_UNCERTAINTY == Uncertainty(1000, 0.95, 0)
    with pytest.raises(AttributeError):
        u.n_boot = 10  # type: ignore[misc]
    for bad in ({"n_boot": 0}, {"confidence": 1.0}, {"confidence": 0.0}, {"confidence": -0.5}):
        with pytest.raises(ValueError, match="Fix:"):
            Uncertainty(**bad)
