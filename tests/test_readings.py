"""The report's readings (``mathcircuits.report.readings``) state the numbers of their results.

Each reading is the paragraph above a figure. Every test builds a result whose numbers are known, reads the
paragraph back, and checks that each number it states is the result's own (within rounding), in the order
the figure shows them; a reading that names another head, another layer or another accuracy fails.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from mathcircuits.ablation import KnockoutResult, TransferResult
from mathcircuits.ablation.transfer import transfer_row
from mathcircuits.analysis import AttentionByRole, MLPProbeResult
from mathcircuits.models import Head, ModelSpec
from mathcircuits.patching import KeyComponents, PatchingResult, SelectionConfig
from mathcircuits.report.readings import (
    reading_attention,
    reading_knockout,
    reading_patching,
    reading_probes,
    reading_stability,
    reading_transfer,
    reading_unmeasurable,
)

SPEC = ModelSpec(
    "toy", "toy", "Toy", n_layers=5, n_heads=4, n_kv_heads=4, d_head=4, d_model=16, d_mlp=32, vocab_size=30
)


def _patching() -> PatchingResult:
    g = torch.Generator().manual_seed(3)
    per_pair = 0.01 * torch.randn(40, 5, 4, generator=g)
    per_pair[:, 3, 1] -= 0.09  # the strongest head, then L1.H2, then L4.H0
    per_pair[:, 1, 2] -= 0.06
    per_pair[:, 4, 0] -= 0.03
    return PatchingResult(
        head_effects=per_pair.mean(0),
        mlp_effects=torch.zeros(5),
        metric="relative_logit",
        method="exact",
        model=SPEC,
        n_pairs=40,
        per_pair_heads=per_pair,
    )


def test_patching_reading_names_the_strongest_heads_with_their_effects_and_intervals():
    res = _patching()
    key = KeyComponents(model=SPEC, heads=(Head(3, 1), Head(1, 2)), selection=SelectionConfig(rule="topk", k=2))
    text = reading_patching(res, key)
    num = r"([+-]\d+\.\d+)"
    named = re.findall(rf"(L\d+\.H\d+) {num}% \[{num}%, {num}%\]", text)  # the unit on every number
    want = res.top_heads(3)
    assert [h for h, *_ in named] == [str(Head(l, h)) for l, h, _ in want], text
    for (_, v, lo, hi), (l, h, e) in zip(named, want):
        assert float(v) == pytest.approx(100 * e, rel=0.006)  # 3 significant digits
        assert float(lo) == pytest.approx(100 * float(res.head_low[l, h]), rel=0.006)
        assert float(hi) == pytest.approx(100 * float(res.head_high[l, h]), rel=0.006)
        assert all(len(x.strip("+-").replace(".", "").lstrip("0")) == 3 for x in (v, lo, hi)), "3 significant"
        assert float(lo) <= float(v) <= float(hi)
    assert f"over {res.n_pairs} pairs" in text
    assert "The selection rule 'topk' chose 2 key heads (10.0% of all heads)" in text


def test_stability_reading_sorts_heads_by_how_often_resamples_pick_them():
    key = KeyComponents(
        model=SPEC,
        heads=(Head(3, 1), Head(1, 2), Head(4, 0)),
        selection=SelectionConfig(rule="zscore"),
        stability=(0.97, 0.62, 0.31),
        stability_others={"L0.H3": 0.4},
        stability_sizes=(3,) * 100,
        stability_depths=(0.5,) * 100,
        stability_n_boot=100,
    )
    text = reading_stability(key)
    assert "resampled 100 times" in text and "rule 'zscore'" in text
    assert "Selected in at least 80% of resamples: L3.H1." in text, "only the head at 97% is firm"
    assert "Selected in fewer than half: L4.H0 (31%)" in text and "L1.H2 (" not in text, "62% is neither"
    assert "L0.H3 (40%)" in text
    unmeasured = KeyComponents(model=SPEC, heads=(Head(3, 1),))
    assert "not measured" in reading_stability(unmeasured)


def test_knockout_reading_states_each_curve_end_and_the_random_spread():
    rnd = torch.tensor([[0.95, 0.9, 0.85], [0.95, 0.92, 0.8], [0.95, 0.91, 0.88]])
    ko = KnockoutResult([0, 1, 2], [0.95, 0.5, 0.2], rnd, 0.95, "add", n_pairs=40)
    text = reading_knockout([ko])
    m = re.search(r"add: (\d+)% with nothing removed → (\d+)% \[(\d+)%, (\d+)%\] with the top (\d+) heads removed, "
                  r"vs (\d+)% \(range (\d+)%–(\d+)%\) for (\d+) random orders \(n=(\d+)\)", text)  # fmt: skip
    assert m, text
    base, last, lo, hi, k, mean, rmin, rmax, n_orders, n = map(int, m.groups())
    assert (base, last, k, n_orders, n) == (95, 20, 2, 3, 40)
    assert lo <= last <= hi and lo >= 5 and hi <= 40, "a Wilson interval around 20% of 40 pairs"
    assert (mean, rmin, rmax) == (round(100 * float(rnd[:, -1].mean())), 80, 88)
    assert "k = 0, 1, 2" in text and "one by one" not in text, "the measured ks, not a claim of every k"
    one = KnockoutResult([0, 3, 10], [0.9, 0.5, 0.2], torch.tensor([[0.9, 0.69, 0.6]]), 0.9, "add", n_pairs=40)
    single = reading_knockout([one])
    assert "vs 60% for 1 random order (n=40)" in single and "range" not in single, single
    assert "k = 0, 3, 10" in single


def test_transfer_reading_separates_measured_sets_from_the_others():
    measured = transfer_row("two-digit", [1] * 40, [1] * 10 + [0] * 30, [[1] * 38 + [0] * 2] * 3, ablation="mean")
    skipped = transfer_row("word problems", [1] * 3 + [0] * 37, None, [])
    result = TransferResult(rows=(measured, skipped), key_heads=[Head(3, 1)], n_random=3)
    text = reading_transfer(result)
    assert f"two-digit {measured.key.value:.0%} [{measured.key.low:.0%}, {measured.key.high:.0%}]" in text
    assert f"vs random {measured.random.value:.0%}" in text and "25%" in text and "95%" in text
    assert "word problems" not in text, "a skipped set is not read as measured; it goes under the chart"
    under = reading_unmeasurable(result)
    assert under.startswith("Not measurable on this model") and "two-digit" not in under
    assert f"word problems (clean accuracy {skipped.clean.value:.0%}" in under and "n=40" in under
    assert reading_unmeasurable(TransferResult(rows=(measured,), key_heads=[Head(3, 1)], n_random=3)) == ""


def test_attention_reading_gives_each_heads_excess_with_its_interval_and_class():
    shares = torch.tensor([[0.35, 0.35, 0.05, 0.15, 0.10], [0.02, 0.02, 0.70, 0.16, 0.10]])[None].repeat(6, 1, 1)
    shares = shares + torch.linspace(-0.02, 0.02, 6)[:, None, None] * torch.tensor([1.0, -1.0, 0.0, 0.0, 0.0])
    att = AttentionByRole(
        heads=(Head(3, 1), Head(1, 2)),
        shares=shares,
        baselines=torch.tensor([0.1, 0.1, 0.05, 0.6, 0.15])[None].repeat(6, 1),
        operations=["add"] * 6,
        pair_ids=list(range(6)),
        template_ids=["t"] * 6,
        model=SPEC,
    )
    text = reading_attention(att)
    parts = re.findall(
        r"(L\d+\.H\d+) operands ([+-]\d+\.\d) points \[[^\]]*\], operator ([+-]\d+\.\d) points \[[^\]]*\] \((\w+)\)",
        text,
    )
    assert [p[0] for p in parts] == ["L3.H1", "L1.H2"], text
    summary = att.summary(by_operation=False)
    for (_, ab, op, cls), row, row_class in zip(parts, summary.itertuples(), summary["class"]):
        assert float(ab) == pytest.approx(100 * row.excess_operands, abs=0.051)  # points, one decimal
        assert float(op) == pytest.approx(100 * row.excess_operator, abs=0.051)
        assert cls == row_class
    assert [p[3] for p in parts] == ["operand", "operator"]
    assert "over 6 pairs" in text


def _probes(margin_row: list[float], rank_row: list[float]) -> MLPProbeResult:
    n, L = 8, len(margin_row)
    zeros = torch.zeros(n, L)
    return MLPProbeResult(
        model=ModelSpec("toy", "toy", "Toy", L, 4, 4, 4, 16, 32, 30),
        space="lens",
        input_sim_a=zeros,
        input_sim_b=zeros,
        input_sim_answer=zeros,
        input_sim_others=zeros,
        update_sim_answer=zeros,
        update_sim_others=zeros,
        update_direct_answer=zeros,
        update_direct_margin=torch.tensor([margin_row], dtype=torch.float32).repeat(n, 1),
        lens_rank=torch.tensor([rank_row], dtype=torch.float32).repeat(n, 1),
        lens_prob=zeros,
        operations=["add"] * n,
        pair_ids=list(range(n)),
        answers=["7"] * n,
        candidate_numbers=[7],
        candidate_tokens=[11],
        candidate_texts=["7"],
        case_row=0,
        case_prompt="4 + 3 = ",
        case_answer="7",
        case_answer_label="7",
        case_top_numbers=[["7"]] * L,
        case_top_number_scores=torch.zeros(L, 1),
        case_top_tokens=[["7"]] * L,
        case_top_token_scores=torch.zeros(L, 1),
        case_lens_top=["7"] * L,
    )


@pytest.mark.parametrize(("margin", "rank", "rise", "lens"), [
    ([0.0, 0.1, 0.6, 1.2, 2.0], [40, 12, 3, 0, 0], "L2", "L3"),
    ([0.0, 0.0, 0.0, 0.1, 0.2], [40, 30, 20, 10, 5], "none", "none"),
])  # fmt: skip
def test_probe_reading_names_the_first_raising_layer_and_the_lens_layer(margin, rank, rise, lens):
    res = _probes(margin, rank)
    text = reading_probes(res)
    m = re.search(r"by more than 0\.25 logits is (\S+) \(95% bootstrap interval (\S+) to (\S+)\); the logit lens ranks "
                  r"the answer top-1 for most pairs from (\S+) \((\S+) to (\S+)\)", text)  # fmt: skip
    assert m, text
    assert m.group(1) == rise and m.group(4) == lens
    got = res.first_raising_layer()
    assert rise == ("none" if got is None else f"L{got}")
    assert f"over {len(res.pair_ids)} pairs" in text and "space: lens" in text
    assert not math.isnan(res.layer_interval("raising").low)
