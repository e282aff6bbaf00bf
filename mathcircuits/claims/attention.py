"""Claim C3 by role: operand heads attend to the operands and operator heads to the operator, more than their
layer-mates once the attention sink is left out, on pairs that did not choose the heads.

Zhang et al. (2024, §4.1) find two kinds of key heads: operand heads, which attend from the last position to the
operands, and operator heads, which attend to the operator. The rule tests them as two findings:

1. **Pairs.** Only analysed pairs that are not identification pairs count (the heads were chosen on those); the
   others are left out, and the card says how many.
2. **Sink left out.** Most heads park most of their attention on the sink (the few-shot prefix, the first token),
   so any head that looks at the query beats them. Every share here is of the attention *off* the sink
   (:meth:`~mathcircuits.analysis.AttentionByRole.sink_free`).
3. **Classed on one half, tested on the other.** The pairs, ordered by template, alternate between a classing and
   a testing half. On the classing half a key head is an *operand head* when its sink-free share over uniform
   attention's (its lift) is larger on the operands than on the operator, else an *operator head*.
4. **Null.** Pair by pair, the sink-free share of the key head's layer-mates (the measured non-key heads of its
   layer) on the same role, averaged over them.
5. **Findings.** Per role: per testing pair, the mean over that role's heads of (key share − layer-mates' share);
   its interval (templates as clusters when there are enough: :func:`~mathcircuits.claims.paper.pair_interval`)
   above 0: holds; at or below 0: does not hold; else inconclusive.
6. **Verdict.** C3 holds when every finding holds and does not hold when one does not (each must hold: an
   intersection-union test, which needs no multiplicity correction); otherwise inconclusive.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mathcircuits._errors import FixableValueError
from mathcircuits.analysis import AttentionByRole
from mathcircuits.analysis.roles import ROLE_GROUPS, RoleGroup
from mathcircuits.claims.card import Claim, Verdict
from mathcircuits.claims.paper import above_zero, claim, not_measured, pair_interval
from mathcircuits.models import Head
from mathcircuits.patching import KeyComponents
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY

__all__: list[str] = []

C3_MIN_PAIRS = 4  # testing pairs below which a finding cannot be decided
HEAD_KIND: dict[RoleGroup, str] = {"operands": "operand", "operator": "operator"}


@dataclass(frozen=True)
class RoleFinding:
    """One role's finding: the key heads classed by it, their sink-free share on it and their layer-mates'.

    ``role`` is ``"operands"`` or ``"operator"``; shares are over the testing pairs, the layer-mates' averaged over
    layer-mates, then pairs; ``mates_as_high`` counts layer-mates whose mean share reaches ``key_share``;
    ``difference`` is the per-pair key − layer-mates difference with its interval.
    """

    role: RoleGroup
    heads: tuple[Head, ...]
    key_share: float
    mate_share: float
    mates_as_high: int
    n_mates: int
    difference: Interval
    verdict: Verdict
    reason: str

    def text(self) -> str:
        names = ", ".join(str(h) for h in self.heads)
        return (
            f"{HEAD_KIND[self.role]} {'head' if len(self.heads) == 1 else 'heads'} {names}: "
            f"{self.key_share:.2f} of that on the {self.role}, layer-mates {self.mate_share:.2f} "
            f"({self.mates_as_high} of {self.n_mates} as high), difference {self.difference.points()} "
            f"({self.difference.method}) → {self.verdict}"
        )


@dataclass(frozen=True)
class RoleTest:
    """What C3 measured: one finding per role that has key heads, the sink shares and the pairs behind them.

    ``n_left_out`` counts analysed pairs left out because they chose the heads; ``overlap_checked`` is False when the
    identification pairs were unknown (then none could be left out).
    """

    findings: tuple[RoleFinding, ...]
    key_sink: float
    mate_sink: float
    n_classing: int
    n_testing: int
    n_left_out: int
    overlap_checked: bool


def role_findings(
    attention: AttentionByRole,
    key: KeyComponents,
    chose: Sequence[int] | None = None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> RoleTest:
    """Class each key head by role on half the pairs and test each role against the sink-free layer-mates on the
    other half (the module docstring's steps 1-5).

    ``chose`` holds the identification pairs' ids (None: unknown, nothing left out). Refuses a key head, or every
    layer-mate of one, missing from ``attention``, or no sink measured.
    """
    heads = [Head.of(h) for h in attention.heads]
    missing = _unmeasured(attention, key)
    if missing:
        raise FixableValueError(
            f"the attention result lacks {missing} (key heads, or any layer-mate of a key head). ",
            "re-run analyze, which measures every head of the key heads' layers.",
        )
    keys = {Head.of(h) for h in key.heads}
    key_idx = [i for i, h in enumerate(heads) if h in keys]
    mates = {l: [i for i, h in enumerate(heads) if h.layer == l and h not in keys] for l in {h.layer for h in keys}}
    sf, base = attention.sink_free()
    sink = attention.sink if attention.sink is not None else torch.zeros(0)  # sink_free() refused a result without
    left_out = set(chose or ())
    fresh = [i for i, p in enumerate(attention.pair_ids) if p not in left_out]
    order = sorted(fresh, key=lambda i: (attention.template_ids[i], attention.pair_ids[i]))
    classing, testing = torch.tensor(order[0::2], dtype=torch.long), torch.tensor(order[1::2], dtype=torch.long)
    lift = sf[classing][:, key_idx].nanmean(0) / base[classing].mean(0)  # [key, group]
    role_of = {k: int(bool(lift[j, 1] > lift[j, 0])) for j, k in enumerate(key_idx)}  # ties and NaN: operands
    all_mates = [i for m in mates.values() for i in m]
    findings = []
    for g, role in enumerate(ROLE_GROUPS):
        ks = [k for k in key_idx if role_of[k] == g]
        if not ks:
            continue
        t = sf[testing]
        diff = torch.stack([t[:, k, g] - t[:, mates[heads[k].layer], g].nanmean(1) for k in ks], 1).mean(1)
        ok = torch.isfinite(diff)
        rows = testing[ok].tolist()
        if len(rows) < 2:
            iv = Interval(float("nan"), float("nan"), float("nan"), len(rows), uncertainty.confidence, "none")
        else:
            iv = pair_interval(
                diff[ok],
                [attention.template_ids[i] for i in rows],
                [attention.operations[i] for i in rows],
                uncertainty,
            )
        if len(rows) < C3_MIN_PAIRS:
            verdict, reason = Verdict.INCONCLUSIVE, f"{len(rows)} testing pairs (fewer than {C3_MIN_PAIRS})"
        else:
            verdict, reason = above_zero(iv, "the difference's interval", "layer-mates attend as much, sink left out")
        key_share = float(t[:, ks, g].nanmean())
        group_mates = sorted({i for k in ks for i in mates[heads[k].layer]})
        mate_means = t[:, group_mates, g].nanmean(0)
        findings.append(
            RoleFinding(
                role=role,
                heads=tuple(heads[k] for k in ks),
                key_share=key_share,
                mate_share=float(mate_means.nanmean()),
                mates_as_high=int((mate_means >= key_share).sum()),
                n_mates=len(group_mates),
                difference=iv,
                verdict=verdict,
                reason=reason,
            )
        )
    rows = torch.tensor(fresh, dtype=torch.long)
    return RoleTest(
        findings=tuple(findings),
        key_sink=float(sink[rows][:, key_idx].mean()) if len(fresh) else float("nan"),
        mate_sink=float(sink[rows][:, all_mates].mean()) if len(fresh) else float("nan"),
        n_classing=len(classing),
        n_testing=len(testing),
        n_left_out=len(attention.pair_ids) - len(fresh),
        overlap_checked=chose is not None,
    )


def _unmeasured(attention: AttentionByRole, key: KeyComponents) -> str:
    """The key heads, and the layers without a non-key head, that ``attention`` lacks ("" when none)."""
    keys = {Head.of(h) for h in key.heads}
    heads = {Head.of(h) for h in attention.heads}
    lacking = [str(h) for h in sorted(keys - heads)]
    layers = sorted({h.layer for h in keys})
    lacking += [f"layer {l}'s other heads" for l in layers if not any(h.layer == l and h not in keys for h in heads)]
    return ", ".join(lacking)


def _title(findings: Sequence[RoleFinding]) -> str:
    """The claim's title: only the roles that were tested."""
    roles = {f.role for f in findings}
    if roles == {"operands"}:
        return "they attend to the operands"
    if roles == {"operator"}:
        return "they attend to the operator"
    return "they attend to operands or operator"


def claim_c3(
    attention: AttentionByRole | None,
    key: KeyComponents | None = None,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    stage: str = "analyze",
    why_missing: str | None = None,
    chose: Sequence[int] | None = None,
) -> Claim:
    """C3: operand heads attend to the operands, operator heads to the operator, more than their layer-mates with
    the attention sink left out, on pairs that did not choose the heads (the module docstring's rule).

    ``attention`` must hold the key heads **and** the other heads of their layers. ``chose``: the identification
    pairs' ids (None: unknown, and the card says the overlap is unchecked). The claim's value is the weakest
    finding's difference (key − layer-mates' sink-free share on the role).
    """
    if attention is None:
        return not_measured("C3", stage, reason=why_missing)
    if key is None or not key.heads:
        return not_measured("C3", "identify", "no key heads")
    missing = _unmeasured(attention, key)
    if missing:
        return claim(
            "C3",
            f"the attention was not measured on {missing}",
            Verdict.NOT_MEASURED,
            f"not measured: the attention result lacks {missing}; re-run analyze",
            unit="share difference",
        )
    if attention.sink is None:
        return not_measured("C3", reason="the attention file has no sink measurement; re-run analyze --force")
    test = role_findings(attention, key, chose, uncertainty)
    if test.n_left_out == len(attention.pair_ids):
        return not_measured(
            "C3", reason=f"all {test.n_left_out} analysed pairs chose the heads; re-run analyze on other pairs"
        )
    check = (
        f"{test.n_left_out} analysed pairs that chose the heads left out"
        if test.overlap_checked
        else "overlap with the identification pairs not checked (their ids unknown)"
    )
    absent = [f"no {HEAD_KIND[r]} head" for r in ROLE_GROUPS if r not in {f.role for f in test.findings}]
    text = (
        f"attention off the sink (key heads put {test.key_sink:.0%} on it, their layer-mates {test.mate_sink:.0%}), "
        f"heads classed on {test.n_classing} pairs and tested on {test.n_testing} others ({check}): "
        + "; ".join([f.text() for f in test.findings] + absent)
    )
    verdicts = [f.verdict for f in test.findings]
    if all(v == Verdict.HOLDS for v in verdicts):
        verdict, reason = Verdict.HOLDS, "every role's difference interval lies above 0"
    elif Verdict.FAILS in verdicts:
        bad = next(f for f in test.findings if f.verdict == Verdict.FAILS)
        verdict, reason = Verdict.FAILS, f"{HEAD_KIND[bad.role]} heads: {bad.reason}"
    else:
        open_ = [f"{HEAD_KIND[f.role]} heads: {f.reason}" for f in test.findings if f.verdict != Verdict.HOLDS]
        verdict, reason = Verdict.INCONCLUSIVE, "; ".join(open_)
    weakest = min(
        test.findings,
        key=lambda f: (f.verdict != Verdict.FAILS, -math.inf if math.isnan(f.difference.low) else f.difference.low),
    )
    iv = weakest.difference
    c = claim(
        "C3",
        text,
        verdict,
        reason,
        Interval(iv.value, iv.low, iv.high, iv.n, method=iv.method),
        unit=f"sink-free share difference on the {weakest.role} (key − layer-mates)",
    )
    return dataclasses.replace(c, title=_title(test.findings))
