"""Two models, one report: the separation rule, planted differences found, a null pair marks none, the CLI."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from mathcircuits.ablation import KnockoutResult, MLPMediation, RandomControl
from mathcircuits.analysis import AttentionByRole, MLPProbeResult
from mathcircuits.claims import assess_claims
from mathcircuits.cli import main
from mathcircuits.crossmodel import ModelComparison, RunResults, compare_runs
from mathcircuits.crossmodel.measures import depth_interval, separation
from mathcircuits.crossmodel.page import write_comparison
from mathcircuits.models import Head, ModelSpec
from mathcircuits.patching import KeyComponents, SelectionConfig
from mathcircuits.pipeline import ConfigError, RunConfig, run_pipeline
from mathcircuits.pipeline.compare_models import check_same_config, load_run_results
from mathcircuits.stats import Interval

sys.path.insert(0, str(Path(__file__).parent))
from test_pipeline import TINY  # noqa: E402

NAN = float("nan")


def _iv(lo: float, hi: float) -> Interval:
    return Interval((lo + hi) / 2, lo, hi, 10)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((0.6, 0.9), (0.1, 0.5), "A higher"),
        ((0.1, 0.5), (0.6, 0.9), "B higher"),
        ((0.1, 0.6), (0.5, 0.9), "overlap"),
        ((0.1, 0.5), (0.5, 0.9), "overlap"),  # touching ends do not separate
        ((0.1, NAN), (0.6, 0.9), "no interval"),
        ((0.6, math.inf), (0.1, 0.5), "A higher"),  # "no such layer" sorts after every layer
    ],
)
def test_separation_rule(a, b, expected):
    assert separation(_iv(*a), _iv(*b)) == expected


def test_depths_are_layer_bins():
    def at(layer: float, n: int) -> Interval:
        return depth_interval(Interval(float(layer), float(layer), float(layer), 50), n)

    assert separation(at(12, 18), at(21, 30)) == "overlap"  # 0.706 vs 0.724: neither places its layer finer
    assert separation(at(5, 18), at(21, 30)) == "B higher"
    assert at(18, 18).high == math.inf and at(0, 18).low == -0.5 / 17


def _spec(name: str, layers: int, heads: int) -> ModelSpec:
    return ModelSpec(name, name, "LlamaForCausalLM", layers, heads, 1, 8, 32, 64, 100, "llama")


def _run(name: str, layers: int, heads: int, *, key_acc: float, depth: int, excess: float, rise: int) -> RunResults:
    """A run with planted numbers: knockout accuracy with the key heads out, key-head depth, attention on
    operands above uniform, and the first layer whose MLP raises the answer."""
    spec = _spec(name, layers, heads)
    g = torch.Generator().manual_seed(layers)
    key_heads = (Head(depth, 0), Head(depth, 1), Head(depth + 1, 0))
    rel = (depth + 0.0) / (layers - 1)
    key = KeyComponents(
        model=spec,
        heads=key_heads,
        head_scores=(-0.08, -0.06, -0.05),
        selection=SelectionConfig(rule="zscore"),
        stability=(1.0, 1.0, 0.9),
        stability_sizes=tuple(3 + int(x) for x in torch.randint(0, 2, (200,), generator=g)),
        stability_depths=tuple(rel + 0.02 * float(x) for x in torch.randn(200, generator=g)),
        stability_n_boot=200,
    )
    n = 200
    knock = KnockoutResult(
        ks=[3, 10],
        ranked_accuracy=[key_acc, key_acc / 2],
        random_accuracy=torch.full((3, 2), 0.97),
        baseline_accuracy=1.0,
        operation="add",
        ranked_heads=list(key_heads),
        n_pairs=n,
        seeds=[0, 1, 2],
    )
    pairs = 60
    base = torch.tensor([0.05, 0.05, 0.05, 0.6, 0.25]).expand(pairs, 5)  # uniform shares of the five roles
    shares = base[:, None, :].repeat(1, 3, 1).clone()
    shares[:, :, 0] += excess / 2
    shares[:, :, 1] += excess / 2
    shares[:, :, 3] -= excess
    shares += 0.01 * torch.randn(shares.shape, generator=g)
    att = AttentionByRole(
        heads=key_heads,
        shares=shares,
        baselines=base.clone(),
        operations=["add"] * pairs,
        pair_ids=list(range(pairs)),
        template_ids=["add_eq_1"] * pairs,
        model=spec,
    )
    margin = torch.zeros(pairs, layers)
    margin[:, rise:] = 1.0
    margin += 0.1 * torch.randn(margin.shape, generator=g)
    zeros = torch.zeros(pairs, layers)
    rank = torch.full((pairs, layers), 5.0)
    rank[:, rise + 1 :] = 0.0
    probes = MLPProbeResult(
        model=spec, space="lens", **{f: zeros for f in ("input_sim_a", "input_sim_b", "input_sim_answer",
        "input_sim_others", "update_sim_answer", "update_sim_others", "update_direct_answer", "lens_prob")},
        update_direct_margin=margin, lens_rank=rank, operations=["add"] * pairs, pair_ids=list(range(pairs)),
        answers=["8"] * pairs, candidate_numbers=[1], candidate_tokens=[1], candidate_texts=["1"], case_row=0,
        case_prompt="3 + 5 = ", case_answer="8", case_answer_label="8", case_top_numbers=[["8"]] * layers,
        case_top_number_scores=torch.zeros(layers, 1), case_top_tokens=[["8"]] * layers,
        case_top_token_scores=torch.zeros(layers, 1), case_lens_top=["8"] * layers,
    )  # fmt: skip
    # the claims read the random control, the key layers' heads and the later MLPs' margin (docs/claims.md)
    control = RandomControl(
        key_heads=list(key_heads),
        draws=[[Head(depth, 2), Head(depth, 3), Head(depth + 1, 1)]] * 100,
        clean_correct=torch.ones(n),
        key_correct=(torch.arange(n) < key_acc * n).float(),
        random_correct=(torch.arange(n) < 0.97 * n).float().expand(100, n).clone(),
        operations=["add"] * n,
        template_ids=[f"add_eq_{1 + i % 3}" for i in range(n)],
        pair_ids=list(range(n)),
    )
    mates = torch.cat([shares, base[:, None, :].expand(pairs, 2, 5)], 1)  # two non-key heads of the same layers
    layers_att = AttentionByRole(
        heads=(*key_heads, Head(depth, 2), Head(depth + 1, 1)),
        shares=mates,
        baselines=base.clone(),
        operations=["add"] * pairs,
        pair_ids=list(range(pairs)),
        template_ids=[f"add_eq_{1 + i % 3}" for i in range(pairs)],
        model=spec,
        sink=mates[..., 3],  # claim C3 compares the attention off the sink (here the prefix)
        sink_baselines=base[:, 3].clone(),
    )
    clean = 3.0 + 0.1 * torch.randn(pairs, generator=g)
    # C4: the key set's effect (rise / 10 logits), a share rise / 25 of it through the later MLPs; 5 random sets
    # with a tenth of it, a fifth through the MLPs
    total = torch.cat([torch.full((1, pairs), rise / 10), torch.full((5, pairs), rise / 100)])
    total = total * (1 + 0.1 * torch.randn(6, pairs, generator=g))
    share = torch.cat([torch.full((1, pairs), rise / 25), torch.full((5, pairs), 0.2)])
    mlp = MLPMediation(
        key_heads=list(key_heads),
        layers=list(range(depth, layers)),
        clean_margin=clean,
        ablated_margin=clean[None] - total,
        frozen_margin=clean[None] - total + share * total,
        operations=["add"] * pairs,
        template_ids=[f"add_eq_{1 + i % 3}" for i in range(pairs)],
        pair_ids=list(range(pairs)),
        random_heads=[[Head(depth, h)] for h in range(5)],
    )
    card = assess_claims(key=key, control=control, attention=layers_att, mediation=mlp)
    return RunResults(name, f"runs/{name}", spec, card, key, {"add": knock}, att, probes)


def test_planted_differences_are_marked_and_nothing_else():
    a = _run("deep", 30, 9, key_acc=0.10, depth=15, excess=0.4, rise=20)
    b = _run("shallow", 18, 4, key_acc=0.90, depth=3, excess=0.0, rise=5)
    cmp = compare_runs(a, b)
    by = {v.quantity: v.difference for v in cmp.values}
    assert by["median relative depth of the key heads"] == "A higher"
    assert by["add: accuracy, key heads ablated"] == "B higher"  # A collapses, B barely moves
    assert by["add: accuracy, as many random heads ablated"] == "overlap"  # both 97%
    assert by["key heads' excess attention on the operands"] == "A higher"
    assert by["first MLP that raises the answer"] == "A higher"  # 20/29 vs 5/17 of the depth
    claims = {c.id: c for c in cmp.claims}
    assert claims["C2"].difference == "B higher" and claims["C4"].unit == "share of the key heads' effect"
    assert claims["C4"].difference == "A higher" and claims["C3"].verdict_a == "holds"  # A's MLPs carry more of it
    assert "deep higher" in "; ".join(cmp.separated())
    assert "verdicts agree" in repr(cmp) and "<table" in cmp._repr_html_()


def test_a_null_pair_marks_no_difference():
    a = _run("model-a", 30, 9, key_acc=0.4, depth=15, excess=0.2, rise=20)
    b = _run("model-b", 30, 9, key_acc=0.4, depth=15, excess=0.2, rise=20)
    cmp = compare_runs(a, b)
    assert cmp.separated() == [] and all(c.agree for c in cmp.claims)


def test_same_model_is_refused():
    a = _run("m", 30, 9, key_acc=0.4, depth=15, excess=0.2, rise=20)
    with pytest.raises(ValueError, match="same model"):
        compare_runs(a, a)


@pytest.mark.slow
def test_comparison_round_trips_and_writes_its_page(tmp_path):
    a = _run("deep", 30, 9, key_acc=0.10, depth=15, excess=0.4, rise=20)
    b = _run("shallow", 18, 4, key_acc=0.90, depth=3, excess=0.0, rise=5)
    cmp = compare_runs(a, b)
    written = write_comparison(cmp, (a, b), tmp_path / "cmp")
    again = ModelComparison.load(written["comparison"])
    assert json.dumps(again.to_dict(), default=str) == json.dumps(cmp.to_dict(), default=str)  # NaN != NaN
    page = written["page"].read_text()
    assert page.count('class="sep"') == len(cmp.separated()) and "unpkg.com" not in page
    assert {p.name for p in (tmp_path / "cmp" / "figures").iterdir()} == {
        "key_head_depths.html", "knockout.html", "attention_roles.html", "mlp_raise.html"
    }  # fmt: skip


@pytest.mark.slow
def test_configs_must_match_outside_the_model_section():
    base = RunConfig.from_dict(TINY)
    other_model = RunConfig.from_dict({**TINY, "model": {"source": "tiny-qwen2", "threads": 1}})
    check_same_config(base, other_model, ("a", "b"))
    other_data = RunConfig.from_dict({**TINY, "data": {**TINY["data"], "n_per_template": 4}})
    with pytest.raises(ConfigError, match=f"data.n_per_template: {base.data.n_per_template} vs 4"):
        check_same_config(base, other_data, ("a", "b"))


@pytest.mark.integration  # two whole pipeline runs into run folders
def test_compare_models_cli_on_two_tiny_runs(tmp_path):
    for src in ("tiny-llama", "tiny-qwen2"):
        run_pipeline(RunConfig.from_dict({**TINY, "model": {"source": src}}), tmp_path / src, progress=False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(
            ["compare-models", str(tmp_path / "tiny-llama"), str(tmp_path / "tiny-qwen2"), "--out", str(tmp_path / "c")]
        )
    assert code == 0 and "separated differences" in out.getvalue()
    cmp = ModelComparison.load(tmp_path / "c" / "comparison.json")
    card = json.loads((tmp_path / "tiny-llama" / "report" / "claims.json").read_text())
    ids = [c.id for c in cmp.claims]  # every row of the two cards, side by side: C1-C6, then N1-N3 (numbers off)
    assert cmp.labels == ("tiny-llama", "tiny-qwen2") and ids == [*(f"C{i}" for i in range(1, 7)), "N1", "N2", "N3"]
    assert len(ids) == len(card["claims"])
    results, _ = load_run_results(tmp_path / "tiny-llama")
    assert set(results.knockout) == {"add"} and results.attention is not None and results.probes is not None
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert (
            main(["compare-models", str(tmp_path / "tiny-llama"), str(tmp_path / "nope"), "--out", str(tmp_path / "d")])
            == 2
        )
    assert "not a run folder" in err.getvalue() and "Fix:" in err.getvalue()
