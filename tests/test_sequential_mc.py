"""The sequential Monte Carlo test (Besag–Clifford): the fixed test when it runs to n, a decided verdict when it
stops, and a valid p-value."""

from __future__ import annotations

import random

import pytest

from mathcircuits.stats.sequential import besag_clifford, stop_after


def fixed_p(exceeds: list[bool]) -> float:
    return (sum(exceeds) + 1) / (len(exceeds) + 1)


@pytest.mark.parametrize("seed", range(20))
def test_equals_the_fixed_test_when_it_runs_to_n(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 120)
    rate = rng.random() * 0.4
    ex = [rng.random() < rate for _ in range(n)]
    h = sum(ex) + 1 + rng.randint(0, 5)  # never reached: it runs to n
    test = besag_clifford(ex, n, h)
    assert test.finished and not test.stopped_early and test.draws == n
    assert test.p_value == pytest.approx(fixed_p(ex))
    assert besag_clifford(ex, n, 0).p_value == pytest.approx(fixed_p(ex))  # h = 0: the fixed test


@pytest.mark.parametrize("decided_at", [0.05, 0.2, 0.5])
@pytest.mark.parametrize("n", [20, 99, 100, 200])
def test_never_stops_before_the_verdict_is_decided(decided_at: float, n: int) -> None:
    h = stop_after(n, decided_at)
    rng = random.Random(n)
    stops = 0
    for _ in range(300):
        rate = rng.random()
        ex = [rng.random() < rate for _ in range(n)]
        test = besag_clifford(ex, n, h)
        if test.stopped_early:
            stops += 1
            # the stop is decided: both its p and the fixed test over all n draws are at or above the threshold
            assert test.p_value >= decided_at
            assert fixed_p(ex) >= decided_at
            assert test.draws < n and sum(ex[: test.draws]) == h and ex[test.draws - 1]
        else:
            assert test.p_value == pytest.approx(fixed_p(ex))
    assert stops > 0  # the rule does stop when the observed value sits inside its null


def test_stop_after_is_the_smallest_h_that_decides() -> None:
    assert stop_after(100, 0.5) == 50
    assert stop_after(20, 0.5) == 10
    assert stop_after(100, 0.05) == 5
    assert stop_after(100, 0.0) == 0
    n, d = 100, 0.5
    h = stop_after(n, d)
    # one exceedance fewer would not decide: stopping at h − 1 at the last draw gives p below the threshold
    assert (h - 1) / n < d


def test_stops_at_the_h_th_exceedance_and_ignores_later_draws() -> None:
    ex = [False, True, False, True, True, True]
    test = besag_clifford(ex, n_max=100, h=2)
    assert (test.draws, test.exceedances, test.p_value) == (4, 2, 0.5)
    assert test.floor == pytest.approx(1 / 101)
    assert "stopped after 4 of 100" in test.describe()
    # not finished: fewer than h exceedances and fewer than n draws
    assert not besag_clifford([False, True], n_max=10, h=3).finished


def test_p_value_is_valid_under_the_null() -> None:
    """Observed and draws exchangeable: P(p <= a) <= a (up to Monte Carlo error) for the sequential p-value."""
    rng = random.Random(0)
    n, h, reps = 40, stop_after(40, 0.5), 4000
    ps = []
    for _ in range(reps):
        obs, null = rng.random(), [rng.random() for _ in range(n)]
        ps.append(besag_clifford([x >= obs for x in null], n, h).p_value)
    for a in (0.05, 0.1, 0.25, 0.5):
        share = sum(p <= a for p in ps) / reps
        assert share <= a + 3 * (a * (1 - a) / reps) ** 0.5


def test_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError):
        besag_clifford([True], n_max=0, h=1)
    with pytest.raises(ValueError):
        stop_after(10, 1.5)
