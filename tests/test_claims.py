"""The claims card: each rule on synthetic results whose verdict is known (holds / does not hold / inconclusive).

Results are built by hand as real result values (no model), so every verdict below follows from the
numbers alone; docs/claims.md states the rules these tests pin down.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import torch

from mathcircuits.ablation import KnockoutResult, TransferResult, transfer_row
from mathcircuits.analysis import AttentionByRole, MLPProbeResult
from mathcircuits.claims import (
    ClaimsCard,
    Verdict,
    assess_claims,
    claim_c1,
    claim_c2,
    claim_c3,
    claim_c4,
    claim_c5,
    claim_c6,
)
from mathcircuits.evaluation import ARITHMETIC, EvalResult
from mathcircuits.models import ModelSpec
from mathcircuits.patching import (
    KeyComponents,
    PatchingResult,
    SelectionConfig,
    select_key_components,
    selection_stability,
)

BIG = ModelSpec(
    "toy", "toy", "Toy", n_layers=20, n_heads=10, n_kv_heads=10, d_head=4, d_model=40, d_mlp=80, vocab_size=50
)


def key(heads, sizes, depths, rule="zscore", stability=None) -> KeyComponents:
    return KeyComponents(
        model=BIG,
        heads=tuple(heads),
        head_scores=tuple(-0.1 for _ in heads),
        selection=SelectionConfig(rule=rule),
        stability=tuple(stability or [1.0] * len(heads)),
        stability_sizes=tuple(sizes),
        stability_depths=tuple(depths),
        stability_n_boot=len(sizes),
    )


# ----------------------------------------------------------------------------- C1


def test_c1_holds_fails_and_is_inconclusive_by_its_intervals():
    mid = [(9, 1), (10, 2), (11, 3)]
    holds = claim_c1(key(mid, [3] * 95 + [4] * 5, [0.5] * 100))
    assert holds.verdict == Verdict.HOLDS and holds.value == pytest.approx(3 / 200) and holds.high < 0.05
    shallow = claim_c1(key([(0, 1), (1, 2), (1, 3)], [3] * 100, [0.05] * 100))
    assert shallow.verdict == Verdict.FAILS, "a depth interval below the middle band does not hold"
    many = claim_c1(key([(10, h) for h in range(10)] + [(9, h) for h in range(5)], [15] * 100, [0.5] * 100))
    assert many.verdict == Verdict.FAILS and many.low >= 0.05, "15 of 200 heads (7.5%) are not sparse"
    straddle = claim_c1(key(mid, [3] * 50 + [14] * 50, [0.5] * 100))
    assert straddle.verdict == Verdict.INCONCLUSIVE, "a share interval across 5% is inconclusive"
    topk = claim_c1(key(mid, [3] * 100, [0.5] * 100, rule="topk"))
    assert topk.verdict == Verdict.NOT_MEASURED and "fixes the number" in topk.reason
    assert claim_c1(None).measurement == "not measured (stage identify off)"


def test_c1_reads_a_real_stability_measurement():
    # 3 planted mid-depth heads stand out of 200; resampling the pairs selects them every time
    gen = torch.Generator().manual_seed(0)
    per_pair = 0.01 * torch.randn(30, 20, 10, generator=gen)
    for l, h in [(9, 1), (10, 2), (11, 3)]:
        per_pair[:, l, h] -= 0.3
    res = PatchingResult(
        head_effects=per_pair.mean(0),
        mlp_effects=torch.zeros(20),
        metric="relative_logit",
        method="exact",
        model=BIG,
        n_pairs=30,
        per_pair_heads=per_pair,
        ci_n_boot=50,
    )
    k = selection_stability(res, select_key_components(res), n_boot=100, seed=1)
    assert k.stability == (1.0, 1.0, 1.0) and k.stability_others == {}
    assert claim_c1(k).verdict == Verdict.HOLDS


# ----------------------------------------------------------------------------- C2


def knockout(ranked, random_rows, n, baseline=1.0, ks=None) -> KnockoutResult:
    return KnockoutResult(
        ks=list(range(len(ranked))) if ks is None else ks,
        ranked_accuracy=[float(x) for x in ranked],
        random_accuracy=torch.tensor(random_rows, dtype=torch.float32),
        baseline_accuracy=baseline,
        operation="add",
        n_pairs=n,
    )


def test_c2_rule():
    k3 = key([(9, 1), (10, 2)], [2] * 10, [0.5] * 10)
    holds = claim_c2({"add": knockout([1, 0.6, 0.2], [[1, 1, 0.98], [1, 0.99, 0.97]], 50)}, k3)
    assert holds.verdict == Verdict.HOLDS and holds.value == pytest.approx(-0.8)
    assert holds.low <= holds.value <= holds.high
    flat = claim_c2({"add": knockout([1, 0.99, 0.98], [[1, 1, 0.98], [1, 1, 0.99]], 200)}, k3)
    assert flat.verdict == Verdict.FAILS, "a key drop whose upper end is below 10 points is no collapse"
    small = claim_c2({"add": knockout([1, 0.9, 0.75], [[1, 1, 1], [1, 1, 1]], 8)}, k3)
    assert small.verdict == Verdict.INCONCLUSIVE, "8 pairs cannot separate a 25-point drop from the random one"
    assert claim_c2({"add": knockout([0.1, 0.0, 0.0], [[0.1, 0.1, 0.1]], 20, 0.1)}).verdict == Verdict.INCONCLUSIVE
    assert claim_c2(None).verdict == Verdict.NOT_MEASURED


def test_c2_reads_the_curve_at_the_number_of_key_heads():
    two = key([(9, 1), (10, 2)], [2] * 10, [0.5] * 10)
    rand = [[1, 1, 1, 0.9], [1, 1, 1, 0.9]]
    # a sparse curve k = 0, 2, 3, 10: two key heads -> k = 2, whatever the index
    c = claim_c2({"add": knockout([1, 0.3, 0.2, 0.1], rand, 50, ks=[0, 2, 3, 10])}, two)
    assert c.value == pytest.approx(-0.7) and "2" in c.measurement
    # without k = 2 the next larger k is read (3), not the third point
    c = claim_c2({"add": knockout([1, 0.2, 0.1], [r[1:] for r in rand], 50, ks=[0, 3, 10])}, two)
    assert c.value == pytest.approx(-0.8)
    # no key heads given: the largest k
    assert claim_c2({"add": knockout([1, 0.2, 0.1], [r[1:] for r in rand], 50, ks=[0, 3, 10])}).value == pytest.approx(
        -0.9
    )


# ----------------------------------------------------------------------------- C3


def attention(shares: torch.Tensor, baselines: torch.Tensor) -> AttentionByRole:
    n, h, _ = shares.shape
    return AttentionByRole(
        heads=tuple((10, i) for i in range(h)),
        shares=shares,
        baselines=baselines,
        operations=["add"] * n,
        pair_ids=list(range(n)),
        template_ids=["t"] * n,
        model=BIG,
    )


def test_c3_rule():
    base = torch.tensor([0.1, 0.1, 0.1, 0.2, 0.5]).expand(30, 5)  # uniform shares of the roles
    on_operands = torch.tensor([0.35, 0.35, 0.05, 0.05, 0.2]).expand(30, 2, 5).clone()
    assert claim_c3(attention(on_operands, base), n_boot=200).verdict == Verdict.HOLDS
    elsewhere = torch.tensor([0.0, 0.0, 0.0, 0.05, 0.95]).expand(30, 2, 5).clone()
    assert claim_c3(attention(elsewhere, base), n_boot=200).verdict == Verdict.FAILS
    gen = torch.Generator().manual_seed(3)
    noise = torch.zeros(6, 2, 5)
    noise[..., 0] = 0.3 * torch.randn(6, 2, generator=gen)  # wide spread around the uniform share on A
    noisy = (base[:6, None, :] + noise).clamp(min=0)
    c = claim_c3(attention(noisy, base[:6]), n_boot=200)
    assert c.verdict == Verdict.INCONCLUSIVE and c.low <= c.value <= c.high


# ----------------------------------------------------------------------------- C4


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


def test_c4_rule():
    k = key([(9, 1), (10, 2)], [2] * 10, [0.5] * 10)  # median layer 9.5 → L9
    rank = torch.full((40, 20), 50.0)
    rank[:, 16:] = 0
    late = torch.zeros(40, 20)
    late[:, 14:] = 2.0
    assert claim_c4(probes(late, rank), k, n_boot=200).verdict == Verdict.HOLDS
    early = torch.zeros(40, 20)
    early[:, 2:] = 2.0
    assert claim_c4(probes(early, rank), k, n_boot=200).verdict == Verdict.FAILS
    gen = torch.Generator().manual_seed(0)
    weak = torch.zeros(8, 20)
    weak[:, 12] = 0.3 + 0.6 * torch.randn(8, generator=gen)  # at L12 only, barely above the 0.25 line
    c = claim_c4(probes(weak, rank[:8]), k, n_boot=200)
    assert c.verdict == Verdict.INCONCLUSIVE and c.high == 20, "some resamples find no raising layer"
    assert claim_c4(probes(late, rank), None).verdict == Verdict.NOT_MEASURED


# ----------------------------------------------------------------------------- C5


def test_c5_rule_uses_only_measurable_held_out_sets():
    def row(name, clean, key_ok, rand_ok, held_in=False):
        n_ok = sum(clean)
        rand = [[1] * rand_ok + [0] * (n_ok - rand_ok)] * 3
        return transfer_row(name, clean, [1] * key_ok + [0] * (n_ok - key_ok), rand, held_in)

    good = [1] * 40
    collapse = row("two-digit", good, 8, 39)
    near_chance = row("word templates", [1] * 2 + [0] * 30, 0, 0)
    held_in = row("add (identification templates, correct)", good, 0, 40, held_in=True)
    assert near_chance.status == "not measurable on this model" and math.isnan(near_chance.key_ablated_accuracy)

    def card(*rows):
        return claim_c5(TransferResult(rows=tuple(rows), key_heads=[(1, 1)], n_random=3))

    c = card(held_in, collapse, near_chance)
    assert c.verdict == Verdict.HOLDS and "not measurable on this model: word templates (clean 0.06)" in c.measurement
    assert card(held_in, row("other", good, 40, 40)).verdict == Verdict.FAILS
    assert card(held_in, row("few", [1] * 8, 5, 8)).verdict == Verdict.INCONCLUSIVE
    only_chance = card(held_in, near_chance)
    assert only_chance.verdict == Verdict.INCONCLUSIVE and "no set measurable" in only_chance.measurement
    assert card(held_in).verdict == Verdict.NOT_MEASURED


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
    assert claim_c6(evals(same, same, same, same, base_math=worse), n_boot=300).verdict == Verdict.HOLDS
    # full no better than base: "precise matches full" would hold trivially (the old rule said "holds")
    idle = claim_c6(evals(same, same, same, same), n_boot=300, precise="precise = the 2 key heads")
    assert idle.verdict == Verdict.INCONCLUSIVE and idle.measurement.startswith("training had no effect")
    assert "precise = the 2 key heads" in idle.measurement  # the card says what precise tuned
    assert claim_c6(evals(worse, [1] * 400, same, same, base_math=worse), n_boot=300).verdict == Verdict.FAILS
    g = torch.Generator().manual_seed(0)
    few = torch.randint(0, 2, (20,), generator=g).tolist()
    shifted = [1 - x if i < 3 else x for i, x in enumerate(few)]
    assert claim_c6(evals(few, shifted, few, few, base_math=[0] * 20), n_boot=300).verdict == Verdict.INCONCLUSIVE
    no_items = claim_c6(evals(same, same, same, same, items=False))
    assert no_items.verdict == Verdict.INCONCLUSIVE and "no per-item results" in no_items.reason
    assert claim_c6(None).verdict == Verdict.NOT_MEASURED


def test_c6_counts_heldout_arithmetic_as_math():
    same, worse = [1, 0] * 200, [0] * 400
    arith = {"base": worse, "precise": same, "full": same}
    only = {m: EvalResult(m, {}, {}).with_benchmark(ARITHMETIC, "arithmetic", xs) for m, xs in arith.items()}
    c = claim_c6(only, n_boot=300)  # math alone: "keeps generic ability" stays open
    assert c.verdict == Verdict.INCONCLUSIVE and ARITHMETIC in c.measurement and "generic" in c.reason
    assert c.value == pytest.approx(0.0)
    arith["precise"] = worse
    both = {m: r.with_benchmark(ARITHMETIC, "arithmetic", arith[m]) for m, r in evals(same, same, same, same).items()}
    assert "SVAMP" in claim_c6(both, n_boot=300).measurement and claim_c6(both, n_boot=300).verdict == Verdict.FAILS
    no_math = {m: EvalResult(m, {"ARC": 0.5}, {"ARC": 2}, {"ARC": "choice"}) for m in arith}
    assert claim_c6(no_math).verdict == Verdict.NOT_MEASURED
    with pytest.raises(ValueError, match="cannot add"):
        only["base"].with_benchmark(ARITHMETIC, "arithmetic", [1])


# ----------------------------------------------------------------------------- the card


def test_card_saves_loads_and_names_missing_stages(tmp_path):
    card = assess_claims(key=key([(9, 1)], [1] * 20, [0.5] * 20), off={"attention": "analyze"})
    back = ClaimsCard.load(card.save(tmp_path / "claims.json"))
    pd.testing.assert_frame_equal(back.to_dataframe(), card.to_dataframe())  # NaN where not measured
    assert [c.id for c in back.claims] == ["C1", "C2", "C3", "C4", "C5", "C6"]
    assert back["C3"].measurement == "not measured (stage analyze off)"
    assert back["C1"].verdict == Verdict.HOLDS
    df = back.to_dataframe()
    assert list(df["id"]) == ["C1", "C2", "C3", "C4", "C5", "C6"] and {"low", "high", "verdict"} <= set(df.columns)
    lines = back.lines()
    assert lines[1].startswith("  C1 ") and "holds" in lines[1] and len(lines) == 7


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
        hits += int(r.key_low <= truth <= r.key_high)
    lo, hi = binomial_band(0.95, n_sims)
    assert lo - 0.02 <= hits / n_sims <= hi


def test_attention_excess_intervals_cover_a_known_excess_at_nominal_rate():
    from helpers import binomial_band

    gen = torch.Generator().manual_seed(1)
    base = torch.tensor([0.1, 0.1, 0.1, 0.2, 0.5])
    truth = torch.tensor([0.2, -0.05])  # excess share on the operands (A+B) of two heads
    hits, n_sims = 0, 150
    for s in range(n_sims):
        shares = base.expand(40, 2, 5).clone()
        shares[..., 0] += truth + 0.15 * torch.randn(40, 2, generator=gen)
        df = attention(shares, base.expand(40, 5)).summary(by_operation=False, n_boot=300, seed=s)
        hits += int(((df.excess_operands_low <= truth.numpy()) & (truth.numpy() <= df.excess_operands_high)).sum())
    lo, hi = binomial_band(0.95, 2 * n_sims)
    assert lo - 0.02 <= hits / (2 * n_sims) <= hi


def test_mlp_margin_intervals_cover_a_known_margin_at_nominal_rate():
    from helpers import binomial_band

    gen = torch.Generator().manual_seed(2)
    truth = torch.linspace(-0.5, 1.5, 20)
    hits, n_sims = 0, 100
    for s in range(n_sims):
        margin = truth + 0.8 * torch.randn(30, 20, generator=gen)
        df = probes(margin, torch.zeros(30, 20)).layer_summary(n_boot=300, seed=s)
        t = truth.numpy()
        hits += int(((df.update_direct_margin_low <= t) & (t <= df.update_direct_margin_high)).sum())
    lo, hi = binomial_band(0.95, 20 * n_sims)
    assert lo - 0.02 <= hits / (20 * n_sims) <= hi


def test_key_components_of_version_2_load_without_stability(tmp_path):
    k = KeyComponents(model=BIG, heads=((9, 1),), head_scores=(-0.1,))
    d = k.to_dict()
    d["__version__"] = 2
    for name in [f for f in d if f.startswith("stability")]:
        del d[name]
    old = KeyComponents.from_dict(d)
    assert not old.has_stability and old.heads == ((9, 1),)
    c = claim_c1(old)
    assert c.verdict == Verdict.INCONCLUSIVE and "re-run identify" in c.reason
    assert math.isnan(old.to_dataframe().stability[0])


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
        res, select_key_components(res, by_effect, rule="threshold", threshold=-0.2), n_boot=200, seed=0
    )
    share = dict(zip(k.heads, k.stability))
    others = {**{f"L{l}.H{h}": s for (l, h), s in share.items()}, **k.stability_others}
    assert others["L10.H1"] == 1.0
    assert 0.2 < others["L11.H2"] < 0.8, "a head near the cut is selected in some resamples only"
    assert len(k.stability_sizes) == len(k.stability_depths) == 200
    back = KeyComponents.load(k.save(Path(tempfile.mkdtemp()) / "k.json"))
    assert back.stability == k.stability and back.stability_sizes == k.stability_sizes
