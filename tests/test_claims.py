"""The claims card: each rule on synthetic results whose verdict is known (holds / does not hold / inconclusive).

Results are built by hand as real result values (no model), so every verdict below follows from the
numbers alone; docs/claims.md states the rules these tests pin down.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import torch

from mathcircuits import ResultFileError
from mathcircuits.ablation import CrossOperation, MLPMediation, RandomControl, TransferResult
from mathcircuits.ablation.transfer import transfer_row
from mathcircuits.analysis import AttentionByRole, MLPProbeResult
from mathcircuits.claims import ClaimsCard, Verdict, assess_claims
from mathcircuits.claims.attention import claim_c3, role_findings
from mathcircuits.claims.finetune import claim_c6
from mathcircuits.claims.knockout import claim_c2, claim_c5
from mathcircuits.claims.margin import claim_c4
from mathcircuits.claims.sparsity import claim_c1
from mathcircuits.evaluation import EvalResult
from mathcircuits.evaluation.table import ARITHMETIC
from mathcircuits.models import Head, ModelSpec
from mathcircuits.patching import (
    KeyComponents,
    PatchingResult,
    SelectionConfig,
    select_key_components,
    selection_stability,
)
from mathcircuits.stats import Interval, Uncertainty

U100, U200, U300 = (Uncertainty(n_boot=n) for n in (100, 200, 300))  # quick bootstraps
BIG = ModelSpec(
    "toy", "toy", "Toy", n_layers=20, n_heads=10, n_kv_heads=10, d_head=4, d_model=40, d_mlp=80, vocab_size=50
)


def key(heads, sizes, depths, rule="zscore", stability=None) -> KeyComponents:
    return KeyComponents(
        model=BIG,
        heads=tuple(Head.of(h) for h in heads),
        head_scores=tuple(-0.1 for _ in heads),
        selection=SelectionConfig(rule=rule),
        stability=tuple(stability or [1.0] * len(heads)),
        stability_sizes=tuple(sizes),
        stability_depths=tuple(depths),
        stability_n_boot=len(sizes),
    )


# ----------------------------------------------------------------------------- C1


def patching(per_pair: torch.Tensor) -> PatchingResult:
    return PatchingResult(
        head_effects=per_pair.mean(0),
        mlp_effects=torch.zeros(BIG.n_layers),
        metric="logit_diff",
        method="exact",
        model=BIG,
        n_pairs=per_pair.shape[0],
        per_pair_heads=per_pair,
        ci_n_boot=50,
    )


def test_c1_rule():
    gen = torch.Generator().manual_seed(0)
    noise = 0.05 * torch.randn(40, 20, 10, generator=gen)
    sparse = noise.clone()
    sparse[:, 9:11, :4] -= 0.5  # 8 heads (4%) in the two middle layers carry the effect
    c = claim_c1(patching(sparse), uncertainty=U200)
    assert c.verdict == Verdict.HOLDS and c.estimate.low >= 2 / 3 and c.estimate.method == "bias_corrected_bootstrap"
    assert "the top 9 heads (fewer than 5% of 200)" in c.measurement and c.correction == "holm"
    diffuse = noise - 0.05  # every head a little: the top 9 hold a twentieth
    c = claim_c1(patching(diffuse), uncertainty=U200)
    assert c.verdict == Verdict.FAILS and "not sparse" in c.reason and c.estimate.high < 0.1
    shallow = noise.clone()
    shallow[:, 0:2, :4] -= 0.5  # concentrated, but in the first layers
    c = claim_c1(patching(shallow), uncertainty=U200)
    assert c.verdict == Verdict.FAILS and "middle" in c.reason
    few = 0.2 * torch.randn(4, 20, 10, generator=torch.Generator().manual_seed(0))
    few[:, 9:11, :4] -= 0.1  # 4 noisy pairs: noise alone fills the rest over all heads, no head is shown to act
    c = claim_c1(patching(few), uncertainty=U200)
    assert c.verdict == Verdict.INCONCLUSIVE and "straddles 33%" in c.reason and "cannot be read" in c.reason
    assert claim_c1(None).measurement == "not measured (stage identify off)"


def test_c1_does_not_hold_for_a_dominant_head_beside_a_long_tail():
    # one head at 1 and 112 heads at 0.08 of it: the tail carries 90% of the effect and most tail heads are
    # non-zero; a margin relative to the strongest head read this as "few heads"
    gen = torch.Generator().manual_seed(4)
    per_pair = 0.02 * torch.randn(60, 20, 10, generator=gen)
    flat = per_pair.view(60, -1)
    flat[:, 95] -= 1.0
    tail = torch.randperm(200, generator=gen)
    tail = tail[tail != 95][:112]
    flat[:, tail] -= 0.08
    c = claim_c1(patching(per_pair), uncertainty=U200)
    assert c.verdict == Verdict.FAILS and "not sparse" in c.reason, c.measurement
    assert c.estimate.high < 0.3  # the top 9 heads hold about a sixth


def test_c1_needs_per_pair_effects_and_ignores_the_selection_cap():
    gen = torch.Generator().manual_seed(1)
    per_pair = 0.05 * torch.randn(30, 20, 10, generator=gen)
    per_pair[:, 9:11, :5] -= 0.5
    res = patching(per_pair)
    no_pairs = PatchingResult(**{**{f: getattr(res, f) for f in ("head_effects", "mlp_effects", "metric", "method",
                                                               "model", "n_pairs")}})  # fmt: skip
    c = claim_c1(no_pairs)
    assert c.verdict == Verdict.INCONCLUSIVE and "per-pair" in c.reason
    # the statistic reads the effects, not the selection: a max_k of 2 or a topk rule changes nothing
    capped = select_key_components(res, rule="zscore", z=3.0, max_k=2)
    topk = select_key_components(res, rule="topk", k=3)
    a, b = claim_c1(res, capped, uncertainty=U100), claim_c1(res, topk, uncertainty=U100)
    assert a.verdict == b.verdict == Verdict.HOLDS and a.estimate.value == b.estimate.value


# ----------------------------------------------------------------------------- C2


def control(key_drop: float, random_drops: list[float], n: int = 200, baseline: float = 1.0) -> RandomControl:
    gen = torch.Generator().manual_seed(0)

    def correct(acc: float) -> torch.Tensor:
        c = torch.zeros(n)
        c[torch.randperm(n, generator=gen)[: round(acc * n)]] = 1
        return c

    return RandomControl(
        key_heads=[Head(9, 1), Head(10, 2)],
        draws=[[Head(9, 2), Head(10, 3)]] * len(random_drops),
        clean_correct=correct(baseline),
        key_correct=correct(baseline - key_drop),
        random_correct=torch.stack([correct(baseline - d) for d in random_drops]),
        operations=["add", "mul"] * (n // 2),
        template_ids=[f"t{i % 8}" for i in range(n)],
        pair_ids=list(range(n)),
        identification_overlap=0,
    )


def test_c2_rule():
    quiet = [0.0, 0.01, 0.02] * 34  # 102 depth-matched random sets that barely matter
    ctl = control(0.7, quiet)
    c = claim_c2(ctl, uncertainty=U200)
    assert c.verdict == Verdict.HOLDS and c.estimate.value == pytest.approx(-0.7, abs=0.01)
    assert ctl.percentile() == 100 and ctl.p_value() == pytest.approx(1 / 103) and c.n_tests == 1
    assert "overlap with identification: 0" in c.measurement  # the card is where the overlap is reported
    assert claim_c2(control(0.05, quiet), uncertainty=U200).verdict == Verdict.FAILS  # below the collapse floor
    as_random = [0.5, 0.6, 0.7, 0.8] * 25  # random sets of the same depth hurt as much: no localisation
    c = claim_c2(control(0.6, as_random), uncertainty=U200)
    assert c.verdict == Verdict.FAILS and "typical random set" in c.reason
    between = [0.0] * 90 + [0.5] * 10  # the key drop beats 90% of the draws: p ≈ 0.11
    assert claim_c2(control(0.4, between), uncertainty=U200).verdict == Verdict.INCONCLUSIVE
    few = claim_c2(control(0.7, [0.0] * 5), uncertainty=U200)  # 5 draws cannot reach p ≤ 0.05
    assert few.verdict == Verdict.INCONCLUSIVE and "control_draws" in few.reason
    # the random half: the paper's "within 2 points", read with a 5-point margin
    loud = [0.15, 0.17, 0.19] * 34  # random sets cost 17 points on average: the key set collapses, random sets hurt
    c = claim_c2(control(0.7, loud), uncertainty=U200)
    assert c.verdict == Verdict.PARTLY and "random half does not hold" in c.reason and "key half holds" in c.reason
    assert "p at its floor, 1/(n+1) = 0.010 (n = 102 draws)" in c.measurement
    near = [0.06, 0.07, 0.08] * 34  # 7 points on average: the interval straddles 2 + 5 points
    assert claim_c2(control(0.7, near), uncertainty=U200).verdict == Verdict.INCONCLUSIVE
    # no collapse: the random sets alone cannot hold the claim up
    assert claim_c2(control(0.05, loud), uncertainty=U200).verdict == Verdict.FAILS
    # 30 draws: p's floor 1/31 leaves no room for a tie below 0.05, so the key half cannot hold
    thirty = claim_c2(control(0.7, [0.0] * 30), uncertainty=U200)
    assert thirty.verdict == Verdict.INCONCLUSIVE and "no room for a tie" in thirty.reason
    low_control = control(0.1, quiet, baseline=0.3)
    low = claim_c2(low_control, uncertainty=U200)  # clean accuracy 30%: no accuracy to collapse, nothing tested
    assert low.verdict == Verdict.INCONCLUSIVE and low_control.baseline() == pytest.approx(0.3, abs=0.02)
    assert math.isnan(low.estimate.value) and low.n_tests == 0 and low.estimate.n == low_control.n_pairs
    assert claim_c2(None).verdict == Verdict.NOT_MEASURED


def test_control_p_value_and_percentile():
    ctl = control(0.5, [0.0, 0.5, 0.6, 0.1])
    assert ctl.p_value() == pytest.approx((1 + 2) / 5)  # two draws drop at least as much
    assert ctl.percentile() == pytest.approx(100 * (2 + 0.5) / 4)  # two smaller, one tie
    df = ctl.to_dataframe()
    assert list(df.operation) == ["all", "add", "mul"] and df.n_pairs.tolist() == [200, 100, 100]
    back = RandomControl.load(ctl.save(Path(tempfile.mkdtemp()) / "c.pt"))
    assert back.draws == ctl.draws and torch.equal(back.random_correct, ctl.random_correct)


# ----------------------------------------------------------------------------- C3


def attention(shares: torch.Tensor, baselines: torch.Tensor, layer: int = 10, sink: bool = True) -> AttentionByRole:
    """Attention by role of heads ``(layer, 0..)``; the sink is the prefix (role 3) unless ``sink`` is False."""
    n, h, _ = shares.shape
    return AttentionByRole(
        heads=tuple(Head(layer, i) for i in range(h)),
        shares=shares,
        baselines=baselines,
        operations=["add"] * n,
        pair_ids=list(range(n)),
        template_ids=[f"t{i % 3}" for i in range(n)],
        model=BIG,
        sink=shares[..., 3] if sink else None,
        sink_baselines=baselines[:, 3] if sink else None,
    )


def test_c3_rule():
    """Roles A, B, operator, prefix (the sink), other. Layer-mates park 85% on the sink; of the rest they put 0.4
    on the operands and 0.07 on the operator."""
    base = torch.tensor([0.1, 0.1, 0.1, 0.2, 0.5]).expand(30, 5)
    gen = torch.Generator().manual_seed(3)
    mate = torch.tensor([0.03, 0.03, 0.01, 0.85, 0.08])

    def heads(*keys: list[float], noise: float = 0.005) -> AttentionByRole:
        rows = torch.stack([torch.tensor(k) for k in keys] + [mate, mate])  # the key heads, then two layer-mates
        shares = rows.repeat(30, 1, 1) + noise * torch.rand(30, len(rows), 5, generator=gen)
        return attention(shares / shares.sum(-1, keepdim=True), base)

    operand, operator = [0.3, 0.3, 0.02, 0.1, 0.28], [0.02, 0.02, 0.5, 0.2, 0.26]  # sink-free 0.67; 0.63
    both = KeyComponents(model=BIG, heads=(Head(10, 0), Head(10, 1)))
    both_roles = heads(operand, operator)
    c = claim_c3(both_roles, both, uncertainty=U200)
    assert c.verdict == Verdict.HOLDS and c.title == "they attend to operands or operator", c.measurement
    found = role_findings(both_roles, both, uncertainty=U200).findings
    assert {f.role: f.heads for f in found} == {"operands": (Head(10, 0),), "operator": (Head(10, 1),)}
    assert all(f.verdict == Verdict.HOLDS for f in found)
    first = KeyComponents(model=BIG, heads=(Head(10, 0),))
    # the sink trap: 0.32 of the key head's attention on the operands against the layer-mates' 0.06 (the old rule
    # held), but 0.36 of what it does not park on the sink against their 0.40
    trap = claim_c3(heads([0.16, 0.16, 0.03, 0.1, 0.55]), first, uncertainty=U200)
    assert trap.verdict == Verdict.FAILS and trap.estimate.high <= 0 and trap.title == "they attend to the operands"
    as_much = [0.18, 0.18, 0.03, 0.1, 0.51]
    assert claim_c3(heads(as_much), first, uncertainty=U200).verdict != Verdict.HOLDS
    wide = heads(as_much, noise=0.0)
    wide.shares[:, 0, 0] += torch.tensor([0.2, -0.2, 0.0])[torch.arange(30) % 3]  # as much, templates disagree
    assert claim_c3(wide, first, uncertainty=U200).verdict == Verdict.INCONCLUSIVE
    unmeasured = attention(heads(operand).shares, base, sink=False)  # a file from before the sink was measured
    assert claim_c3(unmeasured, first).verdict == Verdict.NOT_MEASURED
    only_key = attention(heads(operand).shares[:, :1], base)
    assert claim_c3(only_key, first).verdict == Verdict.NOT_MEASURED
    elsewhere = claim_c3(heads(operand), KeyComponents(model=BIG, heads=(Head(10, 0), Head(11, 3))))  # L11 not measured
    assert elsewhere.verdict == Verdict.NOT_MEASURED and "L11.H3, layer 11's other heads" in elsewhere.measurement
    assert claim_c3(None, first).verdict == Verdict.NOT_MEASURED


# ----------------------------------------------------------------------------- C4


def mediation(total: torch.Tensor, mediated: torch.Tensor) -> MLPMediation:
    """Sets × pairs of total and mediated effects (row 0 the key set) as the margins that give them."""
    n = total.shape[1]
    clean = 5 + torch.zeros(n)
    ablated = clean[None] - total
    return MLPMediation(
        key_heads=[Head(9, 1)],
        layers=list(range(9, 20)),
        clean_margin=clean,
        ablated_margin=ablated,
        frozen_margin=ablated + mediated,
        operations=["add", "mul"] * (n // 2),
        template_ids=[f"t{i % 6}" for i in range(n)],
        pair_ids=list(range(n)),
        random_heads=[[Head(9, 2 + i % 8)] for i in range(total.shape[0] - 1)],
    )


def sets(key_total, key_share, rand_total, rand_share, n_random=40, n=48, seed=0, sd=0.05):
    gen = torch.Generator().manual_seed(seed)
    t = torch.cat([torch.full((1, n), key_total), torch.full((n_random, n), rand_total)]) * (
        1 + 0.3 * torch.randn(1 + n_random, n, generator=gen)
    )
    share = torch.cat([torch.full((1, n), key_share), torch.full((n_random, n), rand_share)])
    return t, t * (share + sd * torch.randn(1 + n_random, n, generator=gen))


def test_c4_rule():
    # the issue's case: the MLPs carry 90% of the key set's effect and 91% of the random sets': C2 restated
    c = claim_c4(mediation(*sets(3.8, 0.90, 0.8, 0.91)), uncertainty=U200)
    assert c.verdict == Verdict.FAILS and "no more of the key heads' effect" in c.reason, c.measurement
    c = claim_c4(mediation(*sets(3.8, 0.90, 0.8, 0.40)), uncertainty=U200)  # specific: half again as large a share
    assert c.verdict == Verdict.HOLDS and c.estimate.low > 0.1 and c.unit == "share of the key heads' effect"
    assert "40 depth-matched random sets lower it by" in c.measurement
    direct = claim_c4(mediation(*sets(3.8, 0.0, 0.8, 0.5)), uncertainty=U200)  # the key heads act directly
    assert direct.verdict == Verdict.FAILS
    via = claim_c4(mediation(*sets(3.8, 0.95, 0.8, 0.0)), uncertainty=U200)  # ... through the MLPs, others directly
    assert via.verdict == Verdict.HOLDS
    # other heads move nothing: their share cannot be read, and a larger total effect alone is C2's finding
    alone = claim_c4(mediation(*sets(3.8, 0.95, 0.0, 0.0)), uncertainty=U200)
    assert alone.verdict == Verdict.INCONCLUSIVE and "not measurably above 0" in alone.reason, alone.measurement
    near = claim_c4(mediation(*sets(3.8, 0.50, 0.8, 0.40, n=12, sd=0.5)), uncertainty=U200)  # 10 points, noisy
    assert near.verdict == Verdict.INCONCLUSIVE and "straddles 0.10" in near.reason, near.measurement
    none = claim_c4(mediation(*sets(-0.5, 0.5, 0.8, 0.4)), uncertainty=U200)  # the key heads raise the margin
    assert none.verdict == Verdict.FAILS and "nothing to mediate" in none.reason
    few = claim_c4(mediation(*sets(3.8, 0.9, 0.8, 0.4, n_random=3)), uncertainty=U200)
    assert few.verdict == Verdict.INCONCLUSIVE and "fewer than 5 random head sets" in few.reason
    assert claim_c4(None).verdict == Verdict.NOT_MEASURED


# ----------------------------------------------------------------------------- C5


def cross(overlap: bool) -> CrossOperation:
    """Two operations' own key sets: the same two heads (Jaccard 1), or disjoint ones (Jaccard 0)."""
    add, sub = [Head(1, 1), Head(2, 0)], ([Head(1, 1), Head(2, 0)] if overlap else [Head(0, 2), Head(3, 3)])
    return CrossOperation(["add", "sub"], {"add": add, "sub": sub}, [1.0, 1.0], torch.full((2, 2), 0.2), [40, 40])


def test_c5_rule_uses_only_measurable_held_out_sets():
    def row(name, clean, key_ok, rand_ok, held_in=False, draws=100):
        n_ok = sum(clean)
        rand = [[1] * rand_ok + [0] * (n_ok - rand_ok)] * draws
        return transfer_row(name, clean, [1] * key_ok + [0] * (n_ok - key_ok), rand, held_in)

    good = [1] * 40
    collapse, collapse2 = row("two-digit", good, 8, 39), row("held-out templates", good, 6, 40)
    near_chance = row("word templates", [1] * 2 + [0] * 30, 0, 0)
    held_in = row("add (identification templates, correct)", good, 0, 40, held_in=True)
    assert near_chance.status == "not measurable on this model" and math.isnan(near_chance.key.value)
    assert collapse.p_value == pytest.approx(1 / 101) and collapse.n_draws == 100

    def card(*rows, overlap=True):
        tr = TransferResult(rows=tuple(rows), key_heads=[Head(1, 1)], n_random=100)
        return claim_c5(tr, cross=cross(overlap))

    c = card(held_in, collapse, collapse2, near_chance)
    assert (
        c.verdict == Verdict.HOLDS
        and "not measurable on this model: word templates (clean accuracy 6%)" in c.measurement
        and "p at its floor, 1/(n+1) = 0.010 (n = 100 draws)" in c.measurement
    )
    assert (
        c.n_tests == 2 and c.estimate.n == collapse.n_correct + collapse2.n_correct
    )  # the near-chance set is named, not pooled into the verdict
    # one measurable set is too few for a verdict, however clear
    one = card(held_in, collapse, near_chance)
    assert one.verdict == Verdict.INCONCLUSIVE and "only 1 measurable" in one.reason
    # both halves: the heads transfer, but operations' own key sets are disjoint
    apart = card(held_in, collapse, collapse2, overlap=False)
    assert apart.verdict == Verdict.PARTLY and "Jaccard 0.00" in apart.measurement
    assert card(held_in, row("other", good, 40, 40), row("other 2", good, 40, 40)).verdict == Verdict.PARTLY
    both_fail = card(held_in, row("other", good, 40, 40), row("other 2", good, 40, 40), overlap=False)
    assert both_fail.verdict == Verdict.FAILS
    as_random = card(held_in, row("as random", good, 8, 8), row("as random 2", good, 8, 8), overlap=False)
    assert as_random.verdict == Verdict.FAILS  # random sets drop as much
    assert card(held_in, row("few", [1] * 8, 5, 8), row("few 2", [1] * 8, 5, 8)).verdict == Verdict.INCONCLUSIVE
    few = card(held_in, row("few draws", good, 8, 39, draws=20), row("few draws 2", good, 8, 39, draws=20))
    assert few.verdict == Verdict.INCONCLUSIVE  # p's floor 1/21 leaves no room for a tie below 0.05
    # without the overlap half the transfer half alone cannot hold the claim
    tr = TransferResult(rows=(held_in, collapse, collapse2), key_heads=[Head(1, 1)], n_random=100)
    alone = claim_c5(tr)
    assert alone.verdict == Verdict.INCONCLUSIVE and "overlap half not measured" in alone.reason
    only_chance = card(held_in, near_chance)
    assert (
        only_chance.verdict == Verdict.INCONCLUSIVE and only_chance.n_tests == only_chance.estimate.n == 0
    )  # none measured
    assert card(held_in).verdict == Verdict.NOT_MEASURED


def test_c5_says_why_word_problem_heads_are_not_compared():
    good = [1] * 40
    solved = transfer_row("SVAMP word problems", [1] * 3 + [0] * 37, [0] * 3, [[1] * 3] * 100, False)
    two = transfer_row("two-digit", good, [1] * 8 + [0] * 32, [[1] * 40] * 100, False)
    tr = TransferResult(rows=(two, solved), key_heads=[Head(1, 1)], n_random=100)
    assert "not testable on this model (it solves SVAMP 8%, below 50%)" in claim_c5(tr, cross=cross(True)).measurement
    solvable = transfer_row("SVAMP word problems", good, [1] * 8 + [0] * 32, [[1] * 40] * 100, False)
    tr = TransferResult(rows=(two, solvable), key_heads=[Head(1, 1)], n_random=100)
    assert "word problems: not measured (identify patches counterfactual" in claim_c5(tr, cross=cross(True)).measurement


# ----------------------------------------------------------------------------- C6


def evals(precise_math, full_math, precise_gen, base_gen, items=True, base_math=None):
    def res(label, m, g):
        acc = {"SVAMP": sum(m) / len(m), "ARC": sum(g) / len(g)}
        n, kinds = {"SVAMP": len(m), "ARC": len(g)}, {"SVAMP": "math", "ARC": "choice"}
        if not items:
            return EvalResult(label, acc, n, kinds)
        return EvalResult(label, acc, n, kinds, item_correct={"SVAMP": m, "ARC": g})

    return {
        "base": res("base", full_math if base_math is None else base_math, base_gen),
        "precise": res("precise", precise_math, precise_gen),
        "full": res("full", full_math, base_gen),
    }


def test_c6_rule():
    same, worse = [1, 0] * 200, [0] * 400
    holds = claim_c6(evals(same, same, same, same, base_math=worse), uncertainty=U300)
    assert holds.verdict == Verdict.HOLDS and holds.estimate.method == "paired_bootstrap"  # the method is on the card
    # full no better than base: "precise matches full" would hold trivially (the old rule said "holds")
    idle = claim_c6(evals(same, same, same, same), uncertainty=U300, precise="precise = the 2 key heads")
    assert idle.verdict == Verdict.INCONCLUSIVE and idle.measurement.startswith("training had no effect")
    assert "precise = the 2 key heads" in idle.measurement  # the card says what precise tuned
    assert claim_c6(evals(worse, [1] * 400, same, same, base_math=worse), uncertainty=U300).verdict == Verdict.FAILS
    g = torch.Generator().manual_seed(0)
    few = torch.randint(0, 2, (20,), generator=g).tolist()
    shifted = [1 - x if i < 3 else x for i, x in enumerate(few)]
    assert claim_c6(evals(few, shifted, few, few, base_math=[0] * 20), uncertainty=U300).verdict == Verdict.INCONCLUSIVE
    no_items = claim_c6(evals(same, same, same, same, items=False))
    assert no_items.verdict == Verdict.INCONCLUSIVE and "no per-item results" in no_items.reason
    assert claim_c6(None).verdict == Verdict.NOT_MEASURED


def test_c6_counts_heldout_arithmetic_as_math():
    same, worse = [1, 0] * 200, [0] * 400
    arith = {"base": worse, "precise": same, "full": same}
    only = {m: EvalResult(m, {}, {}).with_benchmark(ARITHMETIC, "arithmetic", xs) for m, xs in arith.items()}
    c = claim_c6(only, uncertainty=U300)  # math alone: "keeps generic ability" is not measured, so C6 cannot hold
    assert c.verdict == Verdict.NOT_MEASURED and ARITHMETIC in c.measurement and "generic" in c.reason
    assert c.measurement.startswith("no generic benchmark")
    assert c.estimate.value == pytest.approx(0.0)
    arith["precise"] = worse
    both = {m: r.with_benchmark(ARITHMETIC, "arithmetic", arith[m]) for m, r in evals(same, same, same, same).items()}
    assert (
        "SVAMP" in claim_c6(both, uncertainty=U300).measurement
        and claim_c6(both, uncertainty=U300).verdict == Verdict.FAILS
    )
    no_math = {m: EvalResult(m, {"ARC": 0.5}, {"ARC": 2}, {"ARC": "choice"}) for m in arith}
    assert claim_c6(no_math).verdict == Verdict.NOT_MEASURED
    with pytest.raises(ValueError, match="cannot add"):
        only["base"].with_benchmark(ARITHMETIC, "arithmetic", [1])


# ----------------------------------------------------------------------------- the card


def test_card_saves_loads_and_names_missing_stages(tmp_path):
    gen = torch.Generator().manual_seed(0)
    per_pair = 0.05 * torch.randn(30, 20, 10, generator=gen)
    per_pair[:, 9:11, :5] -= 0.5
    card = assess_claims(
        patching=patching(per_pair), key=key([(9, 1)], [1] * 20, [0.5] * 20), off={"attention": "analyze"}
    )
    back = ClaimsCard.load(card.save(tmp_path / "claims.json"))
    pd.testing.assert_frame_equal(back.to_dataframe(), card.to_dataframe())  # NaN where not measured
    assert [c.id for c in back.claims] == ["C1", "C2", "C3", "C4", "C5", "C6"]
    assert back["C3"].measurement == "not measured (stage analyze off)"
    assert back["C1"].verdict == Verdict.HOLDS
    df = back.to_dataframe()
    assert list(df["id"]) == ["C1", "C2", "C3", "C4", "C5", "C6"] and {"low", "high", "verdict"} <= set(df.columns)
    lines = back.lines()
    assert lines[1].startswith("  C1 ") and "holds" in lines[1] and len(lines) == 7


def test_a_card_in_the_flat_format_loads_to_estimates_and_saves_the_same_dict():
    # a claim's value, low, high, n and interval (the method) are saved flat, as files always had them
    nan = float("nan")
    measured = {
        "id": "C2",
        "title": "t",
        "statement": "s",
        "paper": "p",
        "measurement": "m",
        "value": -0.5,
        "low": -0.7,
        "high": -0.3,
        "unit": "accuracy change (points)",
        "verdict": "holds",
        "reason": "r",
        "n": 40,
        "interval": "cluster_bootstrap_t",
        "n_tests": 1,
        "correction": "none",
    }
    off = {
        **measured,
        "id": "C3",
        "value": nan,
        "low": nan,
        "high": nan,
        "verdict": "not measured",
        "n": 0,
        "interval": "none",
        "n_tests": 0,
    }
    saved = {"__kind__": "mathcircuits.ClaimsCard", "__version__": 3, "claims": [measured, off], "confidence": 0.9,
             "seed": 7, "settings": {"n_boot": 1000}}  # fmt: skip
    card = ClaimsCard.from_dict(saved)
    est = card["C2"].estimate
    assert est == Interval(-0.5, -0.7, -0.3, 40, 0.9, "cluster_bootstrap_t", 7)  # at the card's level and seed
    assert card["C3"].estimate.n == 0 and math.isnan(card["C3"].estimate.value)
    again = card.to_dict()
    assert list(again) == list(saved) and [list(c) for c in again["claims"]] == [list(measured), list(off)]
    assert json.dumps(again) == json.dumps(saved)  # same keys, order and values (NaN written as NaN)
    assert list(card.to_dataframe().columns[3:7]) == ["value", "low", "high", "interval"]
    with pytest.raises(ResultFileError, match="lacks field"):
        ClaimsCard.from_dict({**saved, "claims": [{k: v for k, v in measured.items() if k != "low"}]})


# ----------------------------------------------------------------------------- coverage of the intervals the rules read


def test_transfer_wilson_intervals_cover_a_known_accuracy_at_nominal_rate():
    # per item, the key-ablated model keeps the answer with a known probability (the truth)
    from helpers import binomial_band

    gen = torch.Generator().manual_seed(0)
    truth, n_items, n_sims = 0.3, 40, 400
    hits = 0
    for _ in range(n_sims):
        key_ok = (torch.rand(n_items, generator=gen) < truth).int().tolist()
        rand = [(torch.rand(n_items, generator=gen) < 0.9).int().tolist() for _ in range(3)]
        r = transfer_row("synthetic", [1] * n_items, key_ok, rand)
        hits += int(r.key.low <= truth <= r.key.high)
    lo, hi = binomial_band(0.95, n_sims)
    assert lo - 0.02 <= hits / n_sims <= hi


@pytest.mark.slow
def test_attention_excess_intervals_cover_a_known_excess_at_nominal_rate():
    from helpers import binomial_band

    gen = torch.Generator().manual_seed(1)
    base = torch.tensor([0.1, 0.1, 0.1, 0.2, 0.5])
    truth = torch.tensor([0.2, -0.05])  # excess share on the operands (A+B) of two heads
    hits, n_sims = 0, 150
    for s in range(n_sims):
        shares = base.expand(40, 2, 5).clone()
        shares[..., 0] += truth + 0.15 * torch.randn(40, 2, generator=gen)
        df = attention(shares, base.expand(40, 5)).summary(
            by_operation=False, uncertainty=Uncertainty(n_boot=300, seed=s)
        )
        hits += int(((df.excess_operands_low <= truth.numpy()) & (truth.numpy() <= df.excess_operands_high)).sum())
    lo, hi = binomial_band(0.95, 2 * n_sims)
    assert lo - 0.02 <= hits / (2 * n_sims) <= hi


def probes(margin: torch.Tensor, rank: torch.Tensor) -> MLPProbeResult:
    n, layers = margin.shape
    z = torch.zeros(n, layers)
    return MLPProbeResult(
        model=BIG,
        space="lens",
        input_sim_a=z,
        input_sim_b=z,
        input_sim_answer=z,
        input_sim_others=z,
        update_sim_answer=z,
        update_sim_others=z,
        update_direct_answer=margin,
        update_direct_margin=margin,
        lens_rank=rank,
        lens_prob=z,
        operations=["add"] * n,
        pair_ids=list(range(n)),
        answers=["7"] * n,
        candidate_numbers=[7],
        candidate_tokens=[7],
        candidate_texts=["7"],
        case_row=0,
        case_prompt="3 + 4 = ",
        case_answer="7",
        case_answer_label="7",
        case_top_numbers=[["7"]] * layers,
        case_top_number_scores=torch.zeros(layers, 1),
        case_top_tokens=[["7"]] * layers,
        case_top_token_scores=torch.zeros(layers, 1),
        case_lens_top=["7"] * layers,
    )


@pytest.mark.slow
def test_mlp_margin_intervals_cover_a_known_margin_at_nominal_rate():
    from helpers import binomial_band

    gen = torch.Generator().manual_seed(2)
    truth = torch.linspace(-0.5, 1.5, 20)
    hits, n_sims = 0, 100
    for s in range(n_sims):
        margin = truth + 0.8 * torch.randn(30, 20, generator=gen)
        df = probes(margin, torch.zeros(30, 20)).layer_summary(uncertainty=Uncertainty(n_boot=300, seed=s))
        t = truth.numpy()
        hits += int(((df.update_direct_margin_low <= t) & (t <= df.update_direct_margin_high)).sum())
    lo, hi = binomial_band(0.95, 20 * n_sims)
    assert lo - 0.02 <= hits / (20 * n_sims) <= hi


def test_selection_stability_sees_a_head_that_comes_and_goes():
    gen = torch.Generator().manual_seed(0)
    per_pair = 0.05 * torch.randn(24, 20, 10, generator=gen)
    per_pair[:, 10, 1] -= 0.5  # always far below the rest
    per_pair[:12, 11, 2] -= 0.4  # strong on half the pairs only: mean −0.2, with a wide spread
    res = PatchingResult(
        head_effects=per_pair.mean(0),
        mlp_effects=torch.zeros(20),
        metric="relative_logit",
        method="exact",
        model=BIG,
        n_pairs=24,
        per_pair_heads=per_pair,
        ci_n_boot=50,
    )
    by_effect = SelectionConfig(threshold_of="effect")  # the cut in the metric's units (this result has no total)
    k = selection_stability(
        res, select_key_components(res, by_effect, rule="threshold", threshold=-0.2), uncertainty=U200
    )
    share = dict(zip(k.heads, k.stability))
    others = {**{f"L{l}.H{h}": s for (l, h), s in share.items()}, **k.stability_others}
    assert others["L10.H1"] == 1.0
    assert 0.2 < others["L11.H2"] < 0.8, "a head near the cut is selected in some resamples only"
    assert len(k.stability_sizes) == len(k.stability_depths) == 200
    back = KeyComponents.load(k.save(Path(tempfile.mkdtemp()) / "k.json"))
    assert back.stability == k.stability and back.stability_sizes == k.stability_sizes
