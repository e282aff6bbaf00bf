"""C4: the later MLPs write the answer *because of* the key heads: they carry a larger share of the key heads'
effect on the answer than of other heads' effect (mediation, :mod:`mathcircuits.ablation.mediation`).

The key heads' total effect on the answer margin, ``T``, splits into the part the later MLPs carry, ``M`` (lost
again when the MLPs are frozen at their clean outputs), and the rest. A set of heads upstream of the MLPs has part
of its effect carried by them just by sitting there, and a larger effect gives a larger ``M``; so the claim is not
that ``M`` is large (that restates C2) but that the *share* ``s = M / T`` is larger for the key heads than for C2's
depth-matched random sets, ``s_R = Σ M_r / Σ T_r`` (their effect-weighted share: what a comparable effect of other
heads would have the MLPs carry).

When the random sets' effect is not measurably above 0, their share cannot be read and the claim is inconclusive:
a stand-in reference (such as 0) would let a larger total effect alone make C4 hold, which is C2's finding.
"""

from __future__ import annotations

import torch

from mathcircuits.ablation import MLPMediation
from mathcircuits.claims.card import Claim, Verdict, fmt_interval
from mathcircuits.claims.paper import claim, not_measured, pair_interval
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY
from mathcircuits.stats.testing import bias_corrected_bootstrap

__all__: list[str] = []

C4_MIN_EXCESS = 0.10  # the key heads' mediated share must beat the reference share by more than 10 share points
C4_MIN_SETS = 5  # random sets C4 needs before it reads their pooled share (pooled over sets and pairs)


def claim_c4(
    mediation: MLPMediation | None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    stage: str = "validate",
    why_missing: str | None = None,
) -> Claim:
    """C4 holds when the later MLPs carry a larger share of the key heads' effect on the answer than of random
    heads' effect (the excess's lower bound above :data:`C4_MIN_EXCESS`); does not hold when the excess's upper
    bound is at most :data:`C4_MIN_EXCESS` or the key heads' total effect lies at or below 0; inconclusive when the
    random heads' effect is not measurably above 0 (their share cannot be read, so there is nothing to compare).

    Rule, on ``Δ = s − s_R`` (the key set's mediated share minus the random sets' share, bias-corrected bootstrap
    over templates within operations): **holds** when the key set's total effect lies above 0, at least
    :data:`C4_MIN_SETS` random sets were measured, their mean effect's interval lies above 0 and Δ's lower bound
    exceeds :data:`C4_MIN_EXCESS`; **does not hold** when the total effect lies at or below 0, or Δ's upper bound
    is at most :data:`C4_MIN_EXCESS` (the MLPs carry no more of the key heads' effect than of other heads'); else
    inconclusive. The reference share is the random sets' pooled share ``Σ M_r / Σ T_r``, never a stand-in: a key
    set with a larger total effect does not make C4 hold by itself (that is C2's finding).

    The claim's value is Δ.
    """
    if mediation is None:
        return not_measured("C4", stage, reason=why_missing)
    med = mediation
    span = f"L{min(med.layers)}–L{max(med.layers)}"
    total = pair_interval(med.total[0], med.template_ids, med.operations, uncertainty)
    mediated = float(med.mediated[0].mean())
    r = len(med.random_heads)
    text = (
        f"knocking out the {len(med.key_heads)} key heads lowers the answer margin by "
        f"{fmt_interval(total.value, total.low, total.high)} logits, {mediated:.2f} of it through the MLPs {span} "
        f"(share {med.share(0):.0%})"
    )
    kw = dict(unit="share of the key heads' effect", n_tests=1)
    if total.high <= 0:
        return claim("C4", text, Verdict.FAILS, "the key heads' total effect lies at or below 0: nothing to mediate",
                     **kw)  # fmt: skip
    if r < C4_MIN_SETS:
        return claim(
            "C4",
            text + f"; {r} random head sets measured",
            Verdict.INCONCLUSIVE,
            f"fewer than {C4_MIN_SETS} random head sets, so the share other heads' effect has through the MLPs is "
            "not known; re-run validate",
            **kw,
        )
    rand = pair_interval(med.total[1:].mean(0), med.template_ids, med.operations, uncertainty)
    text += (
        f"; {r} depth-matched random sets lower it by {fmt_interval(rand.value, rand.low, rand.high)} on average, "
        f"{med.pooled_random_share():.0%} of that through the MLPs"
    )
    if rand.low <= 0:
        return claim(
            "C4",
            text,
            Verdict.INCONCLUSIVE,
            "the random sets' effect on the answer margin is not measurably above 0, so the share of it the later "
            "MLPs carry cannot be read and there is nothing to compare the key heads' share with",
            **kw,
        )
    # per pair: the key set's total and mediated effect, the random sets' mean total and mediated effect
    cols = torch.stack([med.total[0], med.mediated[0], med.total[1:].mean(0), med.mediated[1:].mean(0)], 1).double()
    clusters = med.template_ids if any(t != "?" for t in med.template_ids) else None
    strata = med.operations if clusters is not None else None

    def excess(t: torch.Tensor) -> float:
        tk, mk, tr, mr = (t[:, i].mean() for i in range(4))
        if float(tk) == 0 or float(tr) == 0:
            return float("nan")
        return float(mk / tk) - float(mr / tr)

    d = bias_corrected_bootstrap(cols, excess, clusters, strata, uncertainty)
    ref = "the random sets' share"
    text += f"; the key heads' share minus the reference {fmt_interval(d.value, d.low, d.high)}"
    line = f"{C4_MIN_EXCESS:.2f}"
    if d.high <= C4_MIN_EXCESS:
        verdict, reason = (
            Verdict.FAILS,
            f"the key heads' mediated share exceeds {ref} by at most {line} (upper bound {d.high:.2f}): the later "
            "MLPs carry no more of the key heads' effect than of other heads'",
        )
    elif d.low > C4_MIN_EXCESS and total.low > 0:
        verdict, reason = (
            Verdict.HOLDS,
            f"the key heads' mediated share exceeds {ref} by more than {line} (lower bound {d.low:.2f}) and their "
            "total effect lies above 0",
        )
    else:
        verdict, reason = (
            Verdict.INCONCLUSIVE,
            f"the excess of the key heads' mediated share over {ref} ({d.low:.2f} to {d.high:.2f}) straddles {line}"
            + ("" if total.low > 0 else ", or their total effect's interval straddles 0"),
        )
    return claim("C4", text, verdict, reason, Interval(d.value, d.low, d.high, len(med.pair_ids),
                                                       method="bias_corrected_bootstrap"), **kw)  # fmt: skip
