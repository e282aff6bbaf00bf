"""The paper's claims (six, and C6b: C6's localisation control) as data, the rules' thresholds, how a row is made.

:data:`PAPER` holds, per claim of Zhang et al. (ICML 2024), its title, statement and number with where it is
shown; the constants are the rules' thresholds, written out in ``docs/claims.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from mathcircuits.claims.card import NO_ESTIMATE, Claim, Verdict
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.small_clusters import small_cluster_interval

__all__: list[str] = []

C1_MAX_FRACTION = 0.05  # "a few heads": strictly fewer than 5% of all heads (paper §3.2); the concentration's set
C1_MAX_REST = 1 / 3  # ... carry most of the total |effect|: at most a third of it outside them
C1_N_NULL = 1000  # draws of random heads in C1's depth null (the concentration has a bootstrap interval, no null)
C1_BAND = (0.25, 0.75)  # the "middle band" of relative depth, layer / (n_layers − 1), shown beside the depth test
C_ALPHA = 0.05  # a null is rejected when the empirical p-value is at most this
C_NO_BETTER = 0.5  # ... and confirmed ("does not hold") when p is at least this: no better than a typical draw
C2_MIN_COLLAPSE = 0.20  # "collapse": the key drop's interval must lie at or above 20 accuracy points
C2_MIN_DRAWS = 100  # random control draws the claims ask for (fewer can still fail, but say so)
C2_MIN_BASELINE = 0.5  # below this clean accuracy a knockout cannot show a collapse
C2_RANDOM_PAPER = 0.02  # the paper's random half: as many random heads cost at most 2 accuracy points
C2_RANDOM_MARGIN = 0.05  # ... read with this margin: the random sets' mean drop must lie below 2 + 5 = 7 points
C5_MIN_SETS = 2  # measurable held-out sets C5's transfer half needs for a verdict
C5_MIN_OVERLAP = 0.5  # C5's overlap half: operations' own key sets share at least half their heads (mean Jaccard)
C6_MARGIN = 0.05  # "matches" / "keeps": not worse by more than 5 accuracy points

# (title, the paper's statement, the paper's number and where it is shown)
PAPER: dict[str, tuple[str, str, str]] = {
    "C1": (
        "key heads are sparse, mid-depth",
        "A few attention heads matter for arithmetic, and they lie in a middle band of layers.",
        "< 5% of heads; middle layers (path-patching heatmap, §3.2)",
    ),
    "C2": (
        "knocking them out collapses accuracy",
        "Mean-ablating the key heads collapses accuracy, while as many random heads barely matter.",
        "about −70 accuracy points for key heads; random heads within 2 points (knockout curves, §3.3, Fig. 3)",
    ),
    "C3": (
        "they attend to operands or operator",
        "The key heads attend from the last position to the operands or to the operator.",
        "operand heads and operator heads (attention patterns, §4.1)",
    ),
    "C4": (
        "later MLPs write the answer",
        "MLPs after the key heads turn the moved information into the answer.",
        "answer rises in MLP updates of later layers (unembedding probes, §4.2)",
    ),
    "C5": (
        "the heads transfer",
        "The same heads matter for operations and formats not used to find them.",
        "large drops on other operations, formats and word problems (§3.4)",
    ),
    "C6": (
        "precise SFT matches full SFT",
        "Fine-tuning only the key heads matches full fine-tuning on math and keeps generic ability.",
        "on par with full SFT on math; generic benchmarks kept (Table 1, §5)",
    ),
    "C6b": (
        "precise SFT beats random heads",
        "The key heads are where arithmetic is learned: tuning them beats tuning as many random heads.",
        "implied by §5 (no random-heads control in the paper; Wang & Veitch 2025 find random heads nearly as good)",
    ),
}


def claim(
    cid: str, measurement: str, verdict: Verdict, reason: str, estimate: Interval = NO_ESTIMATE, **kw: Any
) -> Claim:
    """A :class:`Claim` of the card: the paper's title, statement and number for ``cid``, and this run's reading.

    ``estimate``: the measured value with its interval (none when not given); ``**kw``: ``unit`` ("" when not
    given), ``n_tests``, ``correction``.
    """
    title, statement, paper = PAPER[cid]
    fields = {"unit": ""} | kw
    return Claim(cid, title, statement, paper, measurement, estimate, verdict=verdict, reason=reason, **fields)


def not_measured(cid: str, stage: str = "", what: str = "", reason: str | None = None) -> Claim:
    """The claim when its input is missing: ``not measured (stage X off[, what])``, or ``not measured (reason)``.

    ``reason`` replaces the stage text (e.g. "no transfer set beyond the identification data").
    """
    text = (
        f"not measured ({reason})"
        if reason is not None
        else f"not measured (stage {stage} off{', ' + what if what else ''})"
    )
    return claim(cid, text, Verdict.NOT_MEASURED, text)


def quantiles(xs: Sequence[float], confidence: float) -> tuple[float, float]:
    """The central ``confidence`` range of resampled values (NaNs left out); NaNs when there are none."""
    t = torch.tensor([x for x in xs if not math.isnan(x)], dtype=torch.float64)
    if t.numel() == 0:
        return float("nan"), float("nan")
    a = 1 - confidence
    q = torch.quantile(t, torch.tensor([a / 2, 1 - a / 2], dtype=torch.float64))
    return float(q[0]), float(q[1])


def above_zero(iv: Interval, subject: str, why_not: str) -> tuple[Verdict, str]:
    """The verdict of a rule "the interval lies above 0", and its reason.

    Holds above 0, does not hold at or below 0 (``why_not`` says what that means, e.g. ``"layer-mates attend as
    much"``), inconclusive when the interval straddles 0.
    """
    if iv.low > 0:
        return Verdict.HOLDS, f"{subject} lies above 0"
    if iv.high <= 0:
        return Verdict.FAILS, f"{subject} lies at or below 0: {why_not}"
    return Verdict.INCONCLUSIVE, f"{subject} straddles 0"


def floor_has_room(n_draws: int, alpha: float = C_ALPHA) -> bool:
    """Whether ``n_draws`` random draws can give ``p ≤ alpha`` even with one draw tying the key set:
    ``2 / (n_draws + 1) ≤ alpha`` (39 draws at α = 0.05)."""
    return 2 / (n_draws + 1) <= alpha + 1e-12


def p_words(p: float, n_draws: int) -> str:
    """An empirical p-value in words: ``"p at its floor, 1/(n+1) = 0.010 (n = 100 draws)"`` when the key set beat
    every draw, else ``"p = 0.034"``."""
    if p <= (1 + 1e-6) / (n_draws + 1):  # the p-values are float32
        return f"p at its floor, 1/(n+1) = {p:.3f} (n = {n_draws} draws)"
    return f"p = {p:.3f}"


def few_draws(n_draws: int, alpha: float = C_ALPHA) -> str:
    """``""``, or why ``n_draws`` cannot reach ``p ≤ alpha`` with room for a tie (for a reason)."""
    if floor_has_room(n_draws, alpha):
        return ""
    return (
        f"; only {n_draws} random draws: p's floor 1/(n+1) = {1 / (n_draws + 1):.3f} leaves no room for a tie below "
        f"{alpha} (needs {math.ceil(2 / alpha) - 1})"
    )


def both_halves(a: Verdict, b: Verdict, control: bool = False) -> Verdict:
    """The verdict of a claim of two halves: holds when both hold, **partly holds** when one holds and the other
    does not, does not hold when neither holds or one does not and the other is open, else inconclusive.

    ``control``: ``b`` is a control of ``a`` (C2's random sets beside the key set's collapse), so it cannot hold
    the claim up on its own: when ``a`` does not hold, the claim does not hold.
    """
    pair = {a, b}
    if pair == {Verdict.HOLDS}:
        return Verdict.HOLDS
    if control and a == Verdict.FAILS:
        return Verdict.FAILS
    if pair == {Verdict.HOLDS, Verdict.FAILS}:
        return Verdict.PARTLY
    if Verdict.FAILS in pair:
        return Verdict.FAILS
    return Verdict.INCONCLUSIVE


def pair_interval(
    values: Sequence[float] | torch.Tensor,
    clusters: Sequence[str],
    strata: Sequence[str],
    uncertainty: Uncertainty,
) -> Interval:
    """Interval of the mean of per-pair values over templates
    (:func:`mathcircuits.stats.small_clusters.small_cluster_interval`).

    A bootstrap-t over template means within operations, which covers with 4 templates; with one template, a
    bootstrap over pairs named ``pair_bootstrap_fallback``. Its value is the mean of template means (operations
    weighted by their pairs).
    """
    known = [c for c in clusters if c != "?"]
    return small_cluster_interval(values, list(clusters) if known else None, list(strata), uncertainty)
