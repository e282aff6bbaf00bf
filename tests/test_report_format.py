"""The report's number format and figures read as a scientist would write them.

Percent differences are percentage points with their unit and 2–3 significant digits; a share of the total is a
positive percentage with its direction in words; a verdict names the rule's margin; the appendix shows no
internal dict; per-template accuracies carry Wilson intervals; knockout curves mark every measured k, draw a band
only over several random orders and keep a short legend; unmeasurable transfer sets are text, not empty slots;
key heads and key MLPs have distinct symbols; the title names the model.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest
import torch

from mathcircuits.ablation import KnockoutResult, TransferResult
from mathcircuits.ablation.transfer import transfer_row
from mathcircuits.claims import Verdict
from mathcircuits.claims.finetune import claim_c6
from mathcircuits.claims.improve import C6Stop, c6_verdict
from mathcircuits.claims.sparsity import claim_c1
from mathcircuits.evaluation import EvalResult
from mathcircuits.evaluation.table import ARITHMETIC
from mathcircuits.models import Head, ModelSpec
from mathcircuits.patching import KeyComponents, PatchingResult, SelectionConfig
from mathcircuits.pipeline import PeakMemory
from mathcircuits.report import ReportParts
from mathcircuits.report.build import report_html
from mathcircuits.report.html import accuracy_with_intervals, claims_table, kv_table, plain_text
from mathcircuits.report.readings import reading_patching
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.interval import format_points, format_share, wilson_interval
from mathcircuits.viz import knockout_curves, patching_heatmap, transfer_bars

SPEC = ModelSpec(
    "SmolLM2-135M-Instruct", "toy", "Toy", n_layers=4, n_heads=5, n_kv_heads=5, d_head=4, d_model=16, d_mlp=32,
    vocab_size=30,
)  # fmt: skip


def test_points_have_a_unit_and_two_to_three_significant_digits():
    assert format_points(0.7565, 0.7056, 0.7981) == "+75.6 points [+70.6, +79.8]"
    assert format_points(-0.03, -0.081, 0.011) == "-3.0 points [-8.1, +1.1]"
    assert format_points(0.5) == "+50.0 points"
    assert format_points(float("nan")) == "n/a"
    assert Interval(0.1234, 0.05, 0.2, 10).points() == "+12.3 points [+5.0, +20.0]"


def test_a_share_is_positive_with_its_direction_in_words():
    assert format_share(-0.173) == "17% of it, in the opposite direction"
    assert format_share(0.052) == "5.2% of it"
    assert "-" not in format_share(-2.366) and "opposite" in format_share(-2.366)


def _patching(sign: float, total: float = 1.0) -> PatchingResult:
    g = torch.Generator().manual_seed(0)
    per_pair = 0.01 * torch.randn(30, 4, 5, generator=g)
    per_pair[:, 2, 1] += sign * 0.2
    return PatchingResult(
        head_effects=per_pair.mean(0),
        mlp_effects=torch.zeros(4),
        metric="answer_logprob",
        method="exact",
        model=SPEC,
        n_pairs=30,
        per_pair_heads=per_pair,
        per_pair_total=torch.full((30,), total) + 0.01 * torch.randn(30, generator=g),
    )


def test_patching_reading_gives_the_top_heads_share_as_a_positive_fraction():
    text = reading_patching(_patching(-1.0))
    share = re.search(r"the strongest head, L2\.H1, carries (\d+)% of it, in the opposite direction", text)
    assert share, text
    assert int(share.group(1)) == pytest.approx(20, abs=1)
    assert "-20" not in text and "−20" not in text
    same = reading_patching(_patching(-1.0, total=-1.0))
    assert "carries 20% of it." in same and "opposite" not in same, same


def test_c1_names_the_fixed_top_count_apart_from_the_key_heads():
    key = KeyComponents(
        model=SPEC, heads=(Head(2, 1), Head(1, 0), Head(3, 3)), selection=SelectionConfig(rule="topk", k=3)
    )
    c = claim_c1(_patching(-1.0), key, uncertainty=Uncertainty(n_boot=50), n_null=50)
    assert "the top 1 head (fewer than 5% of 20) holds" in c.measurement
    assert "the median depth of the top 1 head " in c.measurement and "1 heads" not in c.measurement
    assert "Separately, the selection rule 'topk' chose 3 key heads, the set C2–C6 test" in c.measurement


def _iv(v: float, lo: float, hi: float) -> Interval:
    return Interval(v, lo, hi, 100)


def test_c6_states_its_five_point_margin_in_points():
    up = _iv(0.2, 0.1, 0.3)
    r = c6_verdict(up, _iv(-0.04, -0.08, -0.01), _iv(0.0, -0.02, 0.02))
    assert r.verdict == Verdict.INCONCLUSIVE and "−5-point margin" in r.reason  # excludes 0, straddles −5 points
    r = c6_verdict(up, _iv(-0.01, -0.03, 0.01), None)  # no generic benchmark: C6 cannot hold
    assert r.verdict == Verdict.NOT_MEASURED and r.stop == C6Stop.NO_GENERIC
    r = c6_verdict(up, _iv(-0.2, -0.3, -0.1), None)
    assert r.verdict == Verdict.FAILS and "−5-point margin" in r.reason
    same, worse = [1, 0] * 100, [0] * 200
    arith = {"base": worse, "precise": same, "full": same}
    evals = {m: EvalResult(m, {}, {}).with_benchmark(ARITHMETIC, "arithmetic", xs) for m, xs in arith.items()}
    c = claim_c6(evals, uncertainty=Uncertainty(n_boot=200))
    assert "full − base on math +50.0 points [" in c.measurement, c.measurement
    assert "−5-point margin" in c.measurement and "0.500" not in c.measurement
    assert c.unit.endswith("(points)")


def test_appendix_shows_memory_and_card_values_as_people_read_them():
    peak = PeakMemory(708493312, "cpu_rss", "cpu", True)
    assert plain_text(peak) == "676 MiB (CPU RSS)"
    cell = kv_table({"seconds": 0.5, "peak_memory": {"bytes": 708493312, "how": "cpu_rss", "devices": "cpu"}})
    assert "peak memory" in cell and "676 MiB (CPU RSS)" in cell and "bytes" not in cell and "cpu_rss" not in cell
    card = pd.DataFrame(
        [{"id": "C2", "title": "t", "verdict": "holds", "value": -0.62, "low": -0.7, "high": -0.55,
          "unit": "accuracy change (points)", "n": 10, "measurement": "", "paper": "", "reason": ""}]
    )  # fmt: skip
    shown = claims_table(card)
    assert shown["value [interval]"].tolist() == ["-62.0 points [-70.0, -55.0]"]
    assert "low" not in shown.columns


def test_per_template_accuracies_carry_wilson_intervals():
    df = pd.DataFrame(
        {"operation": ["add", "add"], "template_id": ["(all)", "t1"], "n": [40, 0], "accuracy": [0.75, 0.0]}
    )
    out = accuracy_with_intervals(df)
    w = wilson_interval(30, 40)
    assert out["accuracy (95% Wilson interval)"].tolist() == [f"75% [{w.low:.0%}, {w.high:.0%}]", "–"]
    assert "accuracy" not in out.columns


def test_knockout_curve_marks_each_measured_k_and_draws_no_one_draw_band():
    one = KnockoutResult([0, 3, 10], [0.9, 0.5, 0.2], torch.tensor([[0.9, 0.85, 0.8]]), 0.9, "add", n_pairs=40)
    d = knockout_curves(one).to_dict()
    assert not any("±" in t["name"] for t in d["data"]), "one random order: no band"
    assert list(d["layout"]["xaxis"]["tickvals"]) == [0, 3, 10]
    for t in d["data"]:
        assert "markers" in t["mode"] and list(t["x"]) == [0, 3, 10]
    rnd = torch.tensor([[0.9, 0.85, 0.8], [0.9, 0.8, 0.7]])
    many = [KnockoutResult([0, 3, 10], [0.9, 0.5, 0.2], rnd, 0.9, op, n_pairs=40) for op in "abcdefg"]
    fig = knockout_curves(many[:4]).to_dict()
    shown = [t for t in fig["data"] if t.get("showlegend", True)]
    assert len(shown) == 4 and any("±" in t["name"] for t in fig["data"])
    assert len([t for t in knockout_curves(many).to_dict()["data"] if t.get("showlegend", True)]) <= 6


def test_transfer_chart_draws_only_measured_sets():
    rows = (
        transfer_row("two-digit", [1] * 20, [1] * 4 + [0] * 16, [[1] * 19 + [0]] * 3),
        transfer_row("word problems", [1] * 2 + [0] * 30, None, []),
    )
    d = transfer_bars(TransferResult(rows=rows, key_heads=[Head(2, 1)], n_random=3)).to_dict()
    for bar in d["data"]:
        assert len(bar["x"]) == 1 and bar["x"][0].startswith("two-digit")


def test_heatmap_is_full_width_with_distinct_symbols_for_heads_and_mlps():
    key = KeyComponents(model=SPEC, heads=(Head(2, 1),), mlps=(3,))
    d = patching_heatmap(_patching(1.0), key).to_dict()
    marks = {t["name"]: t["marker"]["symbol"] for t in d["data"][2:]}
    assert marks["key heads"] != marks["key MLPs"]
    assert "width" not in d["layout"], "the map takes the page's width"


def test_title_names_the_model():
    page = report_html(ReportParts(model_spec=SPEC, patching_overall=_patching(1.0)))
    assert "<title>Arithmetic circuits in SmolLM2-135M-Instruct</title>" in page
    assert "<title>mine</title>" in report_html(ReportParts(title="mine", patching_overall=_patching(1.0)))


def test_attention_excess_figure_is_in_points_like_its_reading():
    from mathcircuits.analysis import AttentionByRole
    from mathcircuits.viz import attention_excess

    shares = torch.tensor([[0.35, 0.35, 0.05, 0.15, 0.10], [0.02, 0.02, 0.70, 0.16, 0.10]])[None].repeat(6, 1, 1)
    att = AttentionByRole(
        heads=(Head(3, 1), Head(1, 2)),
        shares=shares + torch.linspace(-0.02, 0.02, 6)[:, None, None] * torch.tensor([1.0, -1.0, 0, 0, 0]),
        baselines=torch.tensor([0.1, 0.1, 0.05, 0.6, 0.15])[None].repeat(6, 1),
        operations=["add"] * 6,
        pair_ids=list(range(6)),
        template_ids=["t"] * 6,
        model=SPEC,
    )
    d = attention_excess(att).to_dict()
    summary = att.summary(by_operation=False)
    assert list(d["data"][0]["y"]) == pytest.approx((100 * summary["excess_operands"]).tolist())
    assert "points" in d["layout"]["yaxis"]["title"]["text"]


def test_identify_summary_gives_the_top_heads_share_with_its_direction_in_words():
    from mathcircuits.pipeline import IdentifySummary, OperationTotal

    totals = {
        "add": OperationTotal([0.114, 0.041, 0.167], "bootstrap", [-0.28]),  # head against a positive total
        "sub": OperationTotal([-0.2, -0.3, -0.1], "bootstrap", [-0.5]),  # head with a negative total
    }
    text = "\n".join(IdentifySummary(correct_pairs={}, patched_operations=["add", "sub"], totals=totals).lines())
    assert "add +0.114 [+0.041, +0.167]; top head carries 28% of it, in the opposite direction" in text
    assert "sub -0.200 [-0.300, -0.100]; top head carries 50% of it\n" in text, text  # same direction
    assert "-28" not in text
