"""The statistics behind the claims: tests over heads with templates as units, FDR and Holm, C1 by a count of
heads that matter, C4's place among random sets, and every interval on the card naming its method.

Synthetic results are real result values built by hand (no model); the truth is planted in them.
"""

import math

import pytest
import torch

from mathcircuits.ablation import MLPMediation, RandomControl
from mathcircuits.claims import ClaimsCard, Verdict, assess_claims
from mathcircuits.claims.sparsity import allowed_heads, claim_c1, concentration, units_of
from mathcircuits.models import Head, ModelSpec
from mathcircuits.patching import PatchingResult
from mathcircuits.report.html import claims_table
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.small_clusters import cluster_t_test, small_cluster_interval
from mathcircuits.stats.testing import benjamini_hochberg, holm, null_placement

SPEC = ModelSpec(
    "toy", "toy", "Toy", n_layers=30, n_heads=9, n_kv_heads=9, d_head=4, d_model=36, d_mlp=72, vocab_size=50
)  # 270 heads, as SmolLM2-135M
OPS = ("add", "sub", "mul", "div")


def templated(gen: torch.Generator, per_template: int = 10, n_templates: int = 6) -> tuple[list[str], list[str]]:
    ops = [op for op in OPS for _ in range(n_templates * per_template)]
    tids = [f"{op}{(i // per_template) % n_templates}" for i, op in enumerate(ops)]
    return tids, ops


def effects_map(gen: torch.Generator, means: torch.Tensor, tids: list[str], sd_template=0.02, sd_pair=0.05):
    """Per-pair effects [pair, layer, head]: each head's mean, a random offset per template, pair noise."""
    names = sorted(set(tids))
    offset = sd_template * torch.randn(len(names), means.numel(), generator=gen)
    at = torch.tensor([names.index(t) for t in tids])
    e = means.reshape(1, -1) + offset[at] + sd_pair * torch.randn(len(tids), means.numel(), generator=gen)
    return e.reshape(len(tids), SPEC.n_layers, SPEC.n_heads)


def result(per_pair, tids, ops) -> PatchingResult:
    return PatchingResult(
        head_effects=per_pair.mean(0),
        mlp_effects=torch.zeros(SPEC.n_layers),
        metric="answer_logprob",
        method="exact",
        model=SPEC,
        n_pairs=per_pair.shape[0],
        per_pair_heads=per_pair,
        pair_templates=tids,
        pair_operations=ops,
        ci_n_boot=20,
    )


# --- the per-head test: templates as units ------------------------------------------------------------------------
def test_the_template_t_test_keeps_its_level_where_a_pair_test_does_not():
    gen = torch.Generator().manual_seed(0)
    tids, ops = templated(gen, per_template=10, n_templates=4)
    null = effects_map(gen, torch.zeros(SPEC.n_layers, SPEC.n_heads), tids, sd_template=0.1, sd_pair=0.05)
    flat = null.reshape(len(tids), -1)  # 270 null heads whose templates differ: between > within
    _, p_templates = cluster_t_test(flat, tids, ops)
    _, p_pairs = cluster_t_test(flat, list(range(len(tids))), ops)
    assert float((p_templates <= 0.05).double().mean()) <= 0.08
    assert float((p_pairs <= 0.05).double().mean()) > 0.3  # pairs as units: most null heads look non-zero


def test_holm_keeps_the_family_wise_rate_and_bh_finds_more():
    gen = torch.Generator().manual_seed(1)
    p_null = torch.rand(2000, 50, generator=gen, dtype=torch.float64)
    fwer = sum(bool(holm(p, 0.05).any()) for p in p_null) / len(p_null)
    assert fwer <= 0.065
    mixed = torch.cat([torch.full((10,), 1e-4, dtype=torch.float64), torch.rand(40, generator=gen).double()])
    mixed[10:15] = torch.tensor([0.002, 0.003, 0.004, 0.005, 0.006])
    assert int(holm(mixed).sum()) < int(benjamini_hochberg(mixed).sum()) and bool(
        (holm(mixed) <= benjamini_hochberg(mixed)).all()
    )
    with pytest.raises(ValueError, match="NaN.*Fix"):
        holm(torch.tensor([0.1, float("nan")]))


# --- C1 ----------------------------------------------------------------------------------------------------------
def test_c1_does_not_hold_on_a_dense_map():
    """A dense map: 120 of 270 heads with consistent effects, the top 13 holding about a fifth of the total."""
    gen = torch.Generator().manual_seed(2)
    tids, ops = templated(gen)
    means = torch.zeros(SPEC.n_layers * SPEC.n_heads)
    dense = torch.randperm(means.numel(), generator=gen)[:120]
    means[dense] = -(0.2 + 0.4 * torch.rand(120, generator=gen))
    per_pair = effects_map(gen, means, tids)
    m = allowed_heads(270)
    assert m == 13  # strictly fewer than 5% of 270 (13.5)
    top = means.abs().topk(m).values.sum() / means.abs().sum()
    assert 0.12 < float(top) < 0.25
    c = claim_c1(result(per_pair, tids, ops), uncertainty=Uncertainty(n_boot=200))
    assert c.verdict == Verdict.FAILS and "not sparse" in c.reason, c.measurement
    assert c.estimate.low <= c.estimate.value <= c.estimate.high < 0.3
    assert c.estimate.method == "bias_corrected_bootstrap" and c.n_tests == 270 and c.correction == "holm"
    units, strata, what = units_of(len(tids), tids, ops)  # the tests C1 reads take the 24 templates as units
    assert len(set(units)) == 24 and strata == ops and what == "24 templates"


def test_c1_strict_five_percent():
    assert [allowed_heads(h) for h in (20, 21, 36, 72, 200, 270, 576)] == [1, 1, 1, 3, 9, 13, 28]


def test_c1_holds_on_a_sparse_mid_depth_map_and_its_concentration_contains_itself():
    gen = torch.Generator().manual_seed(3)
    tids, ops = templated(gen)
    means = torch.zeros(SPEC.n_layers, SPEC.n_heads)
    means[14:16, :4] = -0.8  # 8 heads (3%) in the middle layers
    per_pair = effects_map(gen, means, tids, sd_template=0.01, sd_pair=0.05)
    c = claim_c1(result(per_pair, tids, ops), uncertainty=Uncertainty(n_boot=300))
    assert c.verdict == Verdict.HOLDS, c.reason
    assert c.estimate.low <= c.estimate.value <= c.estimate.high and c.estimate.low > 2 / 3
    assert "8 heads (3.0%) have a non-zero effect under Holm" in c.measurement
    text = c.measurement.split("hold ")[1]  # "...heads hold 97% [95%, 99%] of the total |effect| (bias-corrected"
    est, lo, hi = (float(x.strip("[]%,")) for x in text.split()[:3])
    assert lo <= est <= hi
    raw = 100 * concentration(per_pair.reshape(len(tids), -1).double(), 13)
    assert abs(raw - est) < 5  # the bias correction moves the estimate a little, not somewhere else


def test_c1_is_inconclusive_when_noise_could_be_the_rest():
    gen = torch.Generator().manual_seed(4)
    tids, ops = templated(gen, per_template=2, n_templates=2)
    means = torch.zeros(SPEC.n_layers, SPEC.n_heads)
    means[14:16, :4] = -0.1
    c = claim_c1(result(effects_map(gen, means, tids, 0.1, 0.2), tids, ops), uncertainty=Uncertainty(n_boot=100))
    # over all heads the noise makes the rest large; over the heads shown to act (none) it is 0: no verdict
    assert c.verdict == Verdict.INCONCLUSIVE and "straddles 33%" in c.reason, c.measurement


# --- intervals name their method ---------------------------------------------------------------------------------
def test_the_small_cluster_interval_names_its_method_and_its_fallbacks():
    x = torch.randn(48, generator=torch.Generator().manual_seed(5))
    four = [f"t{i % 4}" for i in range(48)]
    ops = ["add", "mul"] * 24
    u = Uncertainty(n_boot=200)
    assert small_cluster_interval(x, four, ops, u).method == "cluster_bootstrap_t"  # 2 templates each
    one_each = [f"t{i % 2}" for i in range(48)]  # one template per operation: strata dropped, 2 templates in all
    assert small_cluster_interval(x, one_each, ops, u).method == "cluster_t_few"
    three = [f"t{i % 3}" for i in range(48)]
    assert small_cluster_interval(x, three, None, u).method == "cluster_t_few"
    assert small_cluster_interval(x, ["t0"] * 48, ops, u).method == "pair_bootstrap_fallback"
    assert small_cluster_interval(x, None, ops, u).method == "bootstrap"
    iv = small_cluster_interval(x, four, ops, u)
    assert iv.low <= iv.value <= iv.high and iv.method_text == "bootstrap-t over templates"


@pytest.mark.parametrize("n_clusters", [2, 3])
def test_below_four_templates_the_interval_is_a_t_interval_that_covers(n_clusters):
    # the bootstrap-t collapsed to a point at 2 templates and covered 0.80 at 3; the t on template means is exact
    # for normal template means, so it must cover near 95% and never be a point
    gen = torch.Generator().manual_seed(n_clusters)
    u = Uncertainty(n_boot=200)
    labels = [f"t{i % n_clusters}" for i in range(6 * n_clusters)]
    hits, widths = 0, []
    for _ in range(600):
        centre = torch.randn(n_clusters, generator=gen)  # template effects around the true mean 0
        x = centre[torch.arange(6 * n_clusters) % n_clusters] + 0.3 * torch.randn(6 * n_clusters, generator=gen)
        iv = small_cluster_interval(x, labels, None, u)
        assert iv.method == "cluster_t_few" and iv.method_text.startswith("t interval on template means")
        hits += iv.low <= 0 <= iv.high
        widths.append(iv.high - iv.low)
    assert 0.92 <= hits / 600 <= 0.98, hits / 600
    assert min(widths) > 0


SETS = [[Head(14, a), Head(20, b)] for a in range(9) if a != 2 for b in range(9) if b != 8][
    :40
]  # 40 of the 64 there are


def control(n: int = 96) -> RandomControl:
    gen = torch.Generator().manual_seed(6)
    clean = torch.ones(n)
    key = (torch.rand(n, generator=gen) < 0.3).float()
    rand = (torch.rand(40, n, generator=gen) < 0.97).float()
    return RandomControl(
        key_heads=[Head(14, 2), Head(20, 8)],
        draws=SETS,
        clean_correct=clean,
        key_correct=key,
        random_correct=rand,
        operations=[OPS[i % 4] for i in range(n)],
        template_ids=[f"{OPS[i % 4]}{(i // 4) % 4}" for i in range(n)],
        pair_ids=list(range(n)),
        identification_overlap=0,
        n_possible=64,
    )


def mediation(n: int = 96) -> MLPMediation:
    gen = torch.Generator().manual_seed(7)
    clean = 5 + torch.randn(n, generator=gen)
    total = torch.cat([2.6 + 0.5 * torch.randn(1, n, generator=gen), 0.4 + 0.2 * torch.randn(40, n, generator=gen)])
    share = torch.cat([torch.full((1, n), 0.9), torch.full((40, n), 0.3)]) + 0.1 * torch.randn(41, n, generator=gen)
    return MLPMediation(
        key_heads=[Head(14, 2), Head(20, 8)],
        layers=list(range(15, 30)),
        clean_margin=clean,
        ablated_margin=clean[None] - total,
        frozen_margin=clean[None] - total + share * total,
        operations=[OPS[i % 4] for i in range(n)],
        template_ids=[f"{OPS[i % 4]}{(i // 4) % 4}" for i in range(n)],
        pair_ids=list(range(n)),
        random_heads=SETS,
    )


def test_the_card_and_the_report_print_each_intervals_method_and_test_count(tmp_path):
    gen = torch.Generator().manual_seed(8)
    tids, ops = templated(gen)
    means = torch.zeros(SPEC.n_layers, SPEC.n_heads)
    means[14:16, :4] = -0.8
    patching = result(effects_map(gen, means, tids, 0.01, 0.05), tids, ops)
    card = assess_claims(
        patching=patching, control=control(), mediation=mediation(), uncertainty=Uncertainty(n_boot=200)
    )
    assert card["C2"].estimate.method == "cluster_bootstrap_t"
    assert card["C4"].estimate.method == card["C1"].estimate.method == "bias_corrected_bootstrap"
    assert card["C4"].verdict == Verdict.HOLDS and "40 depth-matched random sets" in card["C4"].measurement
    lines = "\n".join(card.lines())
    assert lines.count("bootstrap-t over templates") == 1 and "270 tests, Holm" in lines
    table = claims_table(card.to_dataframe())
    cell = table.loc[table["id"] == "C2", "value [interval]"].item()
    assert cell.endswith("(bootstrap-t over templates)") and "interval" not in table.columns
    back = ClaimsCard.load(card.save(tmp_path / "card.json"))
    assert back["C1"].estimate.method == "bias_corrected_bootstrap" and back["C1"].n_tests == 270


def test_c2_says_when_its_random_sets_are_all_there_are():
    c = assess_claims(control=control(), uncertainty=Uncertainty(n_boot=100))["C2"]
    assert "(every one there is)" not in c.measurement and not control().exhaustive  # 40 of 64 possible
    every = RandomControl(**{**control().__dict__, "n_possible": 40})
    assert every.exhaustive  # the card says so in words (its only place), checked below
    assert "(every one there is)" in assess_claims(control=every, uncertainty=Uncertainty(n_boot=100))["C2"].measurement


def test_null_placement_bounds_the_p_value_over_templates():
    gen = torch.Generator().manual_seed(9)
    tids = [f"t{i % 6}" for i in range(60)]
    clear = torch.cat([3 + torch.randn(60, 1, generator=gen), torch.randn(60, 30, generator=gen)], 1)
    pl = null_placement(clear, tids, None, uncertainty=Uncertainty(n_boot=300))
    assert pl.percentile == 100 and pl.p_value == pytest.approx(1 / 31) and pl.p_high == pytest.approx(1 / 31)
    close = clear.clone()
    close[:, 0] = close[:, 1:].mean(1) + 0.3 + torch.randn(60, generator=gen)  # a little above the null's mean
    pl = null_placement(close, tids, None, uncertainty=Uncertainty(n_boot=300))
    assert pl.p_high > pl.p_value and pl.method == "cluster_bootstrap"


def test_c4_without_random_head_sets_has_no_null_and_is_inconclusive():
    m = mediation()
    bare = MLPMediation(**{**m.__dict__, "random_heads": [], "ablated_margin": m.ablated_margin[:1],
                           "frozen_margin": m.frozen_margin[:1]})  # fmt: skip
    assert bare.total.shape == (1, 96) and math.isnan(bare.pooled_random_share())
    c = assess_claims(mediation=bare, uncertainty=Uncertainty(n_boot=100))["C4"]
    assert c.verdict == Verdict.INCONCLUSIVE and "fewer than 5 random head sets" in c.reason
    unknown = RandomControl(**{**control().__dict__, "n_possible": -1})  # how many sets exist is not known
    assert not unknown.exhaustive
    with pytest.raises(ValueError, match="3 random sets.*Fix: pass one row per head set"):
        MLPMediation(**{**m.__dict__, "random_heads": SETS[:3]})
