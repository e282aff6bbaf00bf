"""C4: the later MLPs write the answer *because of* the key heads: their answer margin falls when the key heads are
knocked out, and by more than when random head sets of the same layers are.

The null is the random control's: the depth-matched sets of non-key heads that C2 knocks out
(:attr:`~mathcircuits.ablation.RandomControl.draws`), scored on the same pairs
(:attr:`~mathcircuits.ablation.MLPMargin.random_drops`). A set of heads in the key heads' layers may lower the
MLPs' margin just by sitting upstream of them; C4 asks whether the key heads do more.
"""

from __future__ import annotations

import torch

from mathcircuits.ablation import MLPMargin
from mathcircuits.claims.card import Claim, Verdict, fmt_interval
from mathcircuits.claims.paper import C_ALPHA, C_NO_BETTER, claim, not_measured, pair_interval
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY
from mathcircuits.stats.testing import null_placement

__all__: list[str] = []


def claim_c4(
    margin: MLPMargin | None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    stage: str = "validate",
    why_missing: str | None = None,
) -> Claim:
    """C4 (causal): knocking out the key heads lowers the later MLPs' answer margin more than random sets do.

    Rule: **holds** when the key set's drop interval lies above 0 and its p-value among the random sets stays at
    most :data:`~mathcircuits.claims.paper.C_ALPHA` in 95% of template resamples; **does not hold** when the
    interval lies at or below 0, or ``p ≥`` :data:`~mathcircuits.claims.paper.C_NO_BETTER` (the key set lowers
    the margin no more than a typical random set); else inconclusive (also without random sets).

    The claim's value is the mean drop of the summed margin (logits).
    """
    if margin is None:
        return not_measured("C4", stage, reason=why_missing)
    iv = pair_interval(margin.drops, margin.template_ids, margin.operations, uncertainty)
    span = f"L{min(margin.layers)}–L{max(margin.layers)}"
    text = (
        f"MLPs {span} raise the answer by {float(margin.clean_margin.mean()):.2f} logits over the other numbers; "
        f"with the {len(margin.key_heads)} key heads knocked out by {float(margin.ablated_margin.mean()):.2f}: "
        f"drop {fmt_interval(iv.value, iv.low, iv.high, digits=2)}"
    )
    r = len(margin.random_heads)
    kw = dict(estimate=Interval(iv.value, iv.low, iv.high, iv.n, method=iv.method), unit="logits", n_tests=1)
    if iv.high <= 0:
        return claim("C4", text, Verdict.FAILS, "the drop's interval lies at or below 0: the MLPs do not need "
                     "the key heads", **kw)  # fmt: skip
    if r == 0:
        return claim(
            "C4",
            text + "; no random head sets measured",
            Verdict.INCONCLUSIVE,
            "no random head sets of the key heads' layers were knocked out, so the drop has no null; re-run validate",
            **kw,
        )
    rand = margin.random_drops
    tids = margin.template_ids if any(t != "?" for t in margin.template_ids) else None
    pl = null_placement(torch.cat([margin.drops[:, None], rand.T], 1), tids, margin.operations, uncertainty)
    means = rand.mean(1)
    text += (
        f"; {r} random sets of the same layers: drops {float(means.min()):.2f} to {float(means.max()):.2f} "
        f"(mean {float(means.mean()):.2f}), key set at percentile {pl.percentile:.0f} (p = {pl.p_value:.3f}; "
        f"{uncertainty.confidence:.0%} bound over resampled templates {pl.p_high:.3f})"
    )
    if pl.p_value >= C_NO_BETTER:
        verdict, reason = (
            Verdict.FAILS,
            (
                f"p = {pl.p_value:.2f} ≥ {C_NO_BETTER}: random sets of the key heads' layers lower the MLPs' margin as "
                "much as the key heads"
            ),
        )
    elif iv.low > 0 and pl.p_high <= C_ALPHA:
        verdict, reason = (
            Verdict.HOLDS,
            (
                f"the drop's interval lies above 0 and the key set's p among {r} random sets stays ≤ {C_ALPHA} "
                f"(bound {pl.p_high:.3f})"
            ),
        )
    else:
        few = f"; only {r} random sets (p ≥ {1 / (1 + r):.2f})" if 1 / (1 + r) > C_ALPHA else ""
        verdict, reason = (
            Verdict.INCONCLUSIVE,
            (
                f"the drop's interval straddles 0, or the key set's p among the random sets ({pl.p_value:.3f}, bound "
                f"{pl.p_high:.3f}) lies between {C_ALPHA} and {C_NO_BETTER}{few}"
            ),
        )
    return claim("C4", text, verdict, reason, **kw)
