"""mathcircuits.numbers: each analysis recovers what is planted in a tiny model, and finds nothing beyond its null
in the same model without the plant; the suffix fast path equals the plain forward; claims N1–N3 can fail."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from planted_numbers import adder_model, planted_embedding_model

from mathcircuits.claims import ClaimsCard, Verdict, claim_n1, claim_n2, claim_n3
from mathcircuits.data import load_templates
from mathcircuits.data.swaps import swap_pairs
from mathcircuits.models import hooks, load_model
from mathcircuits.models.forward.suffix import SuffixRunner
from mathcircuits.numbers import (
    HelixPatchResult,
    HelixResult,
    NeuronResult,
    NumbersConfig,
    NumberStates,
    ProbeResult,
    Spectrum,
    TooFewCorrect,
    fit_helix,
    heuristic_neurons,
    mod_probes,
    number_contexts,
    number_spectra,
    number_states,
    operand_grid,
)
from mathcircuits.numbers.ablation import NeuronKnockout
from mathcircuits.numbers.patch import subspace_shifts
from mathcircuits.numbers.probes import cohen_kappa
from mathcircuits.numbers.reading import token_fixed_periods
from mathcircuits.pipeline import ConfigError
from mathcircuits.stats import Interval, Uncertainty

CONTEXTS = ("", "x ", "y = ")
U20, U100, U200 = (Uncertainty(n_boot=n) for n in (20, 100, 200))  # quick bootstraps


@pytest.fixture(scope="module")
def templates():
    return load_templates()


@pytest.fixture(scope="module")
def embedded_models(tmp_path_factory):
    """Single-token-number models: with a planted period, parity or helix, and without (the control)."""
    out = {}
    for plant in ("period10", "parity", "helix", None):
        model, _, basis = planted_embedding_model(tmp_path_factory.mktemp(f"tok-{plant}"), plant)
        out[plant] = (model, number_states(model, range(100), CONTEXTS), basis)
    return out


@pytest.fixture(scope="module")
def adder_runs(templates):
    """The hand-wired adder with and without its parity neuron, analysed on its 5 x 5 grid."""
    out = {}
    for parity, d_mlp in ((True, 128), (False, 128), (True, 512)):
        model = adder_model(parity, d_mlp)
        grid = operand_grid(model.tokenizer, templates, "add_eq_1", (0, 4), fewshot=False)
        out[(parity, d_mlp)] = (
            model,
            grid,
            heuristic_neurons(model, grid, [1], heads=[(1, 0), (1, 1)], uncertainty=U200),
        )
    return out


# ----------------------------------------------------------------------------- the fast path


@pytest.mark.parametrize("family", ["tiny-llama", "tiny-gpt2", "tiny-gemma2", "tiny-gpt-neox"])
def test_suffix_runner_equals_the_plain_forward_from_every_block(family):
    model = load_model(family)
    toks = model.to_tokens(["1 + 2 = 3\n4 + 5 = 9\n3 + 7 = ", "1 + 2 = 3\n4 + 5 = 9\n8 + 1 = "])
    plain = model.bridge(toks)[:, -1]
    last = model.spec.n_layers - 1

    def zero(act, hook):
        act = act.clone()
        act[:, -1, :5] = 0
        return act

    hooked = model.bridge.run_with_hooks(toks, fwd_hooks=[(hooks.sub(last, "mlp.hook_post"), zero)])[:, -1]
    for start in (toks.shape[1] - 1, toks.shape[1] - 5):
        run = SuffixRunner(model, toks, start)
        for layer in range(model.spec.n_layers):
            assert torch.allclose(run.run(from_layer=layer), plain, atol=1e-4)
        assert torch.allclose(run.run([(hooks.sub(last, "mlp.hook_post"), zero)], from_layer=last), hooked, atol=1e-4)
        assert not torch.allclose(hooked, plain, atol=1e-3)  # the hook does something, so the check means something
        assert run.cache.get_seq_length() == start  # the cache is back to the prefix after every run


# ----------------------------------------------------------------------------- reading numbers


def test_digit_split_numbers_are_read_at_their_last_token(templates):
    model = load_model("tiny-llama")
    ctx = number_contexts(model.tokenizer, templates, ("add", "sub"), n=3, first="add_eq_1")
    assert len(ctx) == 3 and ctx[0].endswith("5 + 3 = 8\n")
    st = number_states(model, range(30), ctx[:2])
    assert st.tokenization == "multi-token" and "last token" in st.reading
    assert st.tokens_per_number[:12] == (1,) * 10 + (2, 2)
    emb = model.hf_model.get_input_embeddings().weight.detach()
    three = model.tokenizer.convert_tokens_to_ids("3")
    assert torch.allclose(st.states[0, 23, 0], emb[three]) and torch.allclose(st.states[1, 3, 0], emb[three])
    assert not torch.allclose(st.states[0, 23, 1], st.states[0, 3, 1])  # after a block the tens digit is seen


def test_single_token_numbers_are_recognised(embedded_models):
    st = embedded_models[None][1]
    assert st.tokenization == "single-token" and st.tokens_per_number == (1,) * 100
    assert st.states.shape == (3, 100, 3, 64) and "one token" in st.reading


# ----------------------------------------------------------------------------- spectra


def test_spectrum_recovers_a_planted_period_and_finds_nothing_without_it(embedded_models):
    planted = number_spectra(embedded_models["period10"][1], n_shuffles=100, uncertainty=U200)
    control = number_spectra(embedded_models[None][1], n_shuffles=100, uncertainty=U200)
    assert planted.periods_above("emb")[0] == 10.0 and 10.0 in planted.periods_above("2")
    assert control.periods_above("emb") == () and control.periods_above("1") == ()
    assert 10.0 not in planted.baseline_periods  # the token-id frequency proxy of 0–99 is smooth, not periodic
    assert planted.beyond_baseline("emb") == planted.periods_above("emb")


def test_digit_split_baseline_explains_the_period_of_ten():
    model = load_model("tiny-llama")
    spec = number_spectra(number_states(model, range(100), ("", "x ")), n_shuffles=100, uncertainty=U100)
    assert {10.0, 5.0, 2.0} <= set(spec.baseline_periods)  # the units digit's embedding is periodic in 10
    assert spec.beyond_baseline("emb") == ()
    assert set(spec.bands()) == {"emb", "early 1–1", "middle 2–2", "late 3–3"}


# ----------------------------------------------------------------------------- probes


def test_cohen_kappa_is_one_zero_and_bootstrapped():
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    assert float(cohen_kappa(y, y, 3)) == pytest.approx(1.0)
    assert float(cohen_kappa(y, torch.tensor([1, 2, 0, 1, 2, 0]), 3)) < 0
    w = torch.ones(4, 6, dtype=torch.float64)
    assert torch.allclose(cohen_kappa(y, y, 3, w), torch.ones(4, dtype=torch.float64))


def test_probe_recovers_a_planted_parity_and_not_without_it(embedded_models):
    planted = mod_probes(embedded_models["parity"][1], periods=(2, 10), folds=3, uncertainty=U200)
    control = mod_probes(embedded_models[None][1], periods=(2, 10), folds=3, uncertainty=U200)
    assert planted.tokenization == "single-token"
    assert planted.interval("mod 2", 0).low > 0.9 and planted.beats_baselines("mod 2", 0) is True
    assert control.beats_baselines("mod 2", 0) is not True  # random embeddings: parity no better than random labels
    assert control.interval("mod 2", 0).value < planted.interval("mod 2", 0).low


def test_depth_zero_is_a_baseline_only_for_digit_split_tokenizers():
    model = load_model("tiny-llama")
    pr = mod_probes(number_states(model, range(100), ("", "x ", "y ")), periods=(2, 10), folds=3, uncertainty=U100)
    assert pr.tokenization == "multi-token"
    assert pr.interval("mod 10", 0).value == pytest.approx(1.0)  # the units digit token gives it away
    assert pr.interval("units digit", 0).value < 0.05
    assert all(pr.beats_baselines("mod 10", d) is not True for d in range(len(pr.depths)))
    assert len(pr.baselines("mod 2", 1)) == 2


# ----------------------------------------------------------------------------- helix


def test_helix_fit_recovers_a_planted_helix_subspace_and_not_without_it(embedded_models):
    _, states, planted_basis = embedded_models["helix"]
    hx = fit_helix(states, folds=4, n_random=5, n_shuffles=10, uncertainty=U200)
    q = hx.subspace(0)
    overlap = float((planted_basis.T @ q).pow(2).sum()) / hx.k  # 1: the same subspace
    assert hx.k == 8 and overlap > 0.9 and hx.above_null(0) and float(hx.r2[0]) > 0.5
    assert float(hx.helix_ve[0]) > float(hx.random_high[0]) and float(hx.pca_ve[0]) >= float(hx.helix_ve[0]) - 0.05
    control = fit_helix(embedded_models[None][1], folds=4, n_random=5, n_shuffles=10, uncertainty=U200)
    assert not control.above_null(0) and float(control.r2[0]) < 0.05


def test_subspace_patch_of_a_planted_digit_subspace_carries_the_full_effect(templates):
    model = adder_model()
    pairs = swap_pairs(model.tokenizer, templates, "add_eq_1", range(5), range(5), 12, fewshot=False)
    eye = torch.eye(64)
    subspaces = {1: [None, eye, eye[:, :10], eye[:, 10:], torch.linalg.qr(torch.randn(64, 10))[0]]}
    s = subspace_shifts(model, pairs, subspaces)[:, 0]  # [pair, subspace]
    full = s[:, 0]
    assert bool((full > 1).all())  # a → a′ moves the answer toward a′ + b
    assert torch.allclose(s[:, 1], full, atol=1e-4)  # the whole space is the full patch
    assert torch.allclose(s[:, 2], full, atol=1e-3)  # the planted digit dimensions carry all of it
    assert s[:, 3].abs().max() < 1e-3  # the rest carries nothing
    assert float(s[:, 4].mean()) < 0.8 * float(full.mean())  # a random 10-dim subspace carries less


# ----------------------------------------------------------------------------- neurons


def test_neurons_recover_the_planted_mod2_neuron_and_not_without_it(adder_runs):
    res = adder_runs[(True, 128)][2]
    label = res.labels[int(res.pattern[0, 10])]
    assert label == "a mod 2 = 0" and float(res.corr[0, 10]) > 0.95
    assert {res.labels[int(res.pattern[0, i])] for i in range(1, 5)} == {f"a in [{i}, {i}]" for i in range(1, 5)}
    control = adder_runs[(False, 128)][2]
    assert "a mod 2 = 0" not in control.labels
    assert int((control.pattern[0] >= 0).sum()) == int((res.pattern[0] >= 0).sum()) - 1


def test_neurons_sufficient_topk_and_associated_knockout(adder_runs):
    res = adder_runs[(True, 128)][2]
    assert res.clean_accuracy == 1.0 and res.n_correct == 25
    top = res.topk[0]
    assert 8 <= top.chosen <= 13  # 8 operand neurons write non-zero logits; the tried k after 7 is 13
    assert all(a < 0.95 for k, a in zip(top.ks, top.accuracy) if k < 8)
    ko = res.knockout
    assert ko is not None and ko.n_random == 20 and ko.associated.value < 0.2 and ko.drop.low > 0.5
    table = res.type_table()
    assert table.loc[0, "k"] == top.chosen and table.loc[0, "range a"] + table.loc[0, "range b"] >= 8
    with pytest.raises(ValueError, match="at least 20"):
        heuristic_neurons(adder_runs[(True, 128)][0], adder_runs[(True, 128)][1], [1], n_random=5)


def test_neurons_refuse_a_model_that_answers_nothing(templates):
    model = load_model("tiny-llama")
    grid = operand_grid(model.tokenizer, templates, "add_eq_1", (0, 3))
    with pytest.raises(TooFewCorrect, match="too few"):
        heuristic_neurons(model, grid, [1])


# ----------------------------------------------------------------------------- claims N1–N3


def test_claim_n1_holds_on_a_planted_period_and_not_without_it(embedded_models):
    """Single-token numbers: the read token is the whole number, so every period is testable."""
    states = embedded_models["period10"][1]
    probes = mod_probes(states, (2, 5, 10), 3, uncertainty=U200)
    n1 = claim_n1(number_spectra(states, n_shuffles=100, uncertainty=U200), probes)
    assert n1.verdict == Verdict.HOLDS and "T=10" in n1.reason and n1.beyond_paper
    assert probes.token_periods == () and len(probes.depths) - 1 == 2  # 3 testable periods x 2 depths (and depth 0)
    assert n1.n_tests == 6 and n1.correction == "bonferroni"
    control = embedded_models[None][1]
    off = claim_n1(
        number_spectra(control, n_shuffles=100, uncertainty=U200), mod_probes(control, (2, 5, 10), 3, uncertainty=U200)
    )
    assert off.verdict == Verdict.FAILS, off.measurement
    assert claim_n1(None, None).verdict == Verdict.NOT_MEASURED


def test_claim_n1_is_not_testable_where_the_units_digit_fixes_every_period():
    """A digit-split tokenizer reads numbers at the units digit, which fixes n mod 2, 5 and 10 by itself; a
    whole-number period (4 on 0–99) needs the digits combined, and stays testable."""
    tiny = number_states(load_model("tiny-llama"), range(100), CONTEXTS)
    spectra = number_spectra(tiny, n_shuffles=100, uncertainty=U100)
    fixed = mod_probes(tiny, (2, 5, 10), 3, uncertainty=U100)
    split = claim_n1(spectra, fixed)
    assert split.verdict == Verdict.NOT_TESTABLE and str(split.verdict) == "not testable on this tokenizer"
    assert fixed.token_periods == (2, 5, 10) and split.n_tests == 0
    assert "whole-number period" in split.measurement  # the card's advice exists only as words
    whole = mod_probes(tiny, (2, 4, 10), 3, uncertainty=U100)
    assert whole.token_periods == (2, 10)
    n1 = claim_n1(spectra, whole)
    assert n1.verdict in (Verdict.FAILS, Verdict.INCONCLUSIVE) and "T in [2, 10]" in n1.measurement, n1.measurement
    assert n1.n_tests == 3 and len(whole.depths) - 1 == 3 and n1.correction == "bonferroni"  # 1 period x 3 depths


def test_token_fixed_periods_are_the_residues_the_read_token_decides():
    units = [n % 10 for n in range(100)]  # a digit-split tokenizer: the read token is the units digit
    assert token_fixed_periods("multi-token", range(100), units, (2, 3, 4, 5, 10, 20)) == (2, 5, 10)
    assert token_fixed_periods("single-token", range(100), list(range(100)), (2, 5, 10)) == ()


def test_claim_n1_controls_its_scan_over_periods_and_depths(embedded_models):
    """A probe that beats its control at the 95% level at one depth but not at the Bonferroni level of the scan
    (2 depths): the old rule held, the scan's correction leaves it open."""
    states = embedded_models["period10"][1]
    spectra = number_spectra(states, n_shuffles=100, uncertainty=U200)
    pr = mod_probes(states, (10,), 3, uncertainty=U200)
    full = torch.full_like(pr.score, float("nan"))
    marginal = {
        "score": 0.2, "low": 0.1, "high": 0.3, "control": 0.0, "control_low": -0.09, "control_high": 0.09
    }  # fmt: skip
    pr = dataclasses.replace(pr, **{k: full.clone().index_fill_(0, torch.tensor([0]), v) for k, v in marginal.items()})
    assert pr.beats_baselines("mod 10", 1) is True  # unadjusted, 0.1 > 0.09
    n1 = claim_n1(spectra, pr)
    assert n1.verdict == Verdict.INCONCLUSIVE and n1.n_tests == 2 and n1.correction == "bonferroni", n1.measurement


def _patch(helix_pca: tuple[float, float, float], helix: tuple[float, float, float], full: float = 2.0):
    """A patch result with chosen numbers (depth 1; conditions full, helix, PCA, random)."""
    shift = torch.tensor([[full, helix[0], helix[0] - helix_pca[0], 0.0]])
    return HelixPatchResult(
        depths=(1,), conditions=("full", "helix", "pca", "random"), shift=shift, low=shift - 0.2, high=shift + 0.2,
        fraction=shift / full, fraction_low=torch.tensor([[1.0, helix[1] / full, 0.0, 0.0]]),
        fraction_high=torch.tensor([[1.0, helix[2] / full, 1.0, 0.1]]), random_draws=torch.tensor([[0.05, -0.02]]),
        helix_minus_pca=torch.tensor([helix_pca[0]]), diff_low=torch.tensor([helix_pca[1]]),
        diff_high=torch.tensor([helix_pca[2]]), k=8, pairs=((1, 2, 3),) * 10, template="add_eq_1", reading="",
    )  # fmt: skip


def test_claim_n2_can_hold_fail_and_flag_a_subspace_illusion(embedded_models):
    hx = fit_helix(embedded_models["helix"][1], folds=4, n_random=3, n_shuffles=10, uncertainty=U100)
    assert claim_n2(hx, _patch((0.5, 0.2, 0.8), (1.5, 1.2, 1.8))).verdict == Verdict.HOLDS
    assert claim_n2(hx, _patch((-0.5, -0.8, -0.2), (1.0, 0.8, 1.2))).verdict == Verdict.FAILS
    assert claim_n2(hx, _patch((0.1, -0.2, 0.4), (1.0, 0.8, 1.2))).verdict == Verdict.INCONCLUSIVE
    illusion = claim_n2(hx, _patch((2.0, 1.5, 2.5), (3.0, 2.6, 3.4)))
    assert illusion.verdict == Verdict.INCONCLUSIVE and "Makelov" in illusion.reason
    null_fit = fit_helix(embedded_models[None][1], folds=4, n_random=3, n_shuffles=10, uncertainty=U100)
    assert claim_n2(null_fit, _patch((0.5, 0.2, 0.8), (1.5, 1.2, 1.8))).verdict == Verdict.FAILS  # no helix to patch


def test_claim_n3_holds_with_few_neurons_and_fails_when_a_layer_needs_more(adder_runs):
    wide = claim_n3(adder_runs[(True, 512)][2])  # 8 of 512 neurons carry the sums: 2%
    assert wide.verdict == Verdict.HOLDS and wide.estimate.low > 0
    narrow = claim_n3(adder_runs[(True, 128)][2])  # the same 8 neurons are 6% of 128
    assert narrow.verdict == Verdict.FAILS and "5%" in narrow.reason
    res = adder_runs[(True, 512)][2]
    unsure = dataclasses.replace(res.knockout.drop, low=-0.1, high=0.0)
    no_effect = dataclasses.replace(res, knockout=dataclasses.replace(res.knockout, drop=unsure))
    assert claim_n3(no_effect).verdict == Verdict.FAILS
    assert claim_n3(None).verdict == Verdict.NOT_MEASURED


# ----------------------------------------------------------------------------- values, configs, figures


def test_results_round_trip_and_show_themselves(tmp_path, embedded_models, adder_runs):
    states = embedded_models["period10"][1]
    values = [
        states,
        number_spectra(states, n_shuffles=20, uncertainty=U20),
        mod_probes(states, (2,), 3, uncertainty=U20),
        fit_helix(states, folds=3, n_random=2, n_shuffles=3, uncertainty=U20),
        adder_runs[(True, 128)][2],
    ]
    for v, cls in zip(values, (NumberStates, Spectrum, ProbeResult, HelixResult, NeuronResult)):
        back = cls.load(v.save(tmp_path / f"{cls.__name__}.pt"))
        assert type(back) is cls and repr(back) == repr(v) and len(repr(v)) < 400
        assert "<table" in v._repr_html_()


def test_numbers_config_checks_itself():
    assert NumbersConfig().enabled is False  # off unless a config turns it on (configs/default.yaml does, small)
    for bad in ({"grid": (5, 2)}, {"numbers": (0, 9)}, {"periods": (1, 5)}, {"patch_depths": (0,)},
                {"n_random_knockouts": 10}, {"topk_fractions": (0.0,)}):  # fmt: skip
        with pytest.raises((ConfigError, ValueError)):
            NumbersConfig(**bad)


@pytest.mark.slow
def test_figures_of_every_result(embedded_models, adder_runs):
    from mathcircuits.numbers import NumberResults
    from mathcircuits.report import ReportParts
    from mathcircuits.report.build import report_figures, report_html
    from mathcircuits.report.readings import reading_numbers
    from mathcircuits.viz.numbers import numbers_figures

    states = embedded_models["period10"][1]
    parts = {
        "spectra": number_spectra(states, n_shuffles=20, uncertainty=U20),
        "probes": mod_probes(states, (2, 10), 3, uncertainty=U20),
        "helix": fit_helix(states, folds=3, n_random=2, n_shuffles=3, uncertainty=U20),
        "helix_patch": _patch((0.5, 0.2, 0.8), (1.5, 1.2, 1.8)),
        "neurons": adder_runs[(True, 128)][2],
    }
    numbers = NumberResults(**parts)
    figs = numbers_figures(numbers)
    assert set(figs) == {"numbers_spectrum", "numbers_kappa", "numbers_helix_planes", "numbers_helix_patch",
                         "numbers_grid_heatmaps", "numbers_neuron_topk"}  # fmt: skip
    assert all(len(f.data) > 0 for f in figs.values())
    assert "last token" in reading_numbers(numbers) and "Makelov" in reading_numbers(numbers)
    report = ReportParts(numbers=numbers)
    assert 'id="numbers"' in report_html(report) and set(figs) <= set(report_figures(report).saved())
    assert 'id="numbers"' not in report_html(ReportParts())  # no results, no section
    assert math.isfinite(float(parts["helix"].r2[0]))


def test_fast_and_plain_paths_give_the_same_numbers(templates, adder_runs):
    from mathcircuits.models.forward.integrity import fast_paths
    from mathcircuits.numbers import capture_grid

    model, grid, _ = adder_runs[(True, 128)]
    pairs = swap_pairs(model.tokenizer, templates, "add_eq_1", range(5), range(5), 6, fewshot=False)
    subspaces = {1: [None, torch.eye(64)[:, :10]]}
    fast = subspace_shifts(model, pairs, subspaces)
    cap = capture_grid(model, grid, [1], [(1, 0)])
    with fast_paths(False):
        plain = subspace_shifts(model, pairs, subspaces)
        cap_plain = capture_grid(model, grid, [1], [(1, 0)])
    assert torch.allclose(fast, plain, atol=1e-4)
    assert torch.allclose(cap.acts, cap_plain.acts, atol=1e-4) and torch.allclose(cap.grads, cap_plain.grads, atol=1e-4)
    assert torch.equal(cap.correct, cap_plain.correct)


@pytest.mark.integration  # a whole pipeline run into a run folder
def test_the_numbers_stage_writes_its_results_and_says_what_it_skipped(tmp_path):
    from mathcircuits.pipeline import RunConfig, RunPaths, run_pipeline

    cfg = RunConfig.from_dict(
        {
            "model": {"source": "tiny-llama", "threads": 1},
            "data": {"operations": ["add"], "template_ids": ["add_eq_1"], "n_per_template": 32,
                     "keep_only_correct": False},
            "patching": {"min_pairs": 1, "max_pairs": 4},
            "selection": {"rule": "topk", "k": 2},
            "validation": {"knockout_max_k": 1, "n_random": 1, "max_pairs": 4, "transfer_templates": False,
                           "transfer_multi_digit": False, "word_problem_sets": []},
            "analysis": {"max_pairs": 4, "static_formats": []},
            "finetune": {"enabled": False},
            "evaluation": {"enabled": False},
            "numbers": {"enabled": True, "contexts": 2, "probe_folds": 2, "numbers": [0, 39], "n_shuffles": 20,
                        "n_boot": 20, "grid": [0, 3], "patch_pairs": 4, "n_random_subspaces": 1},
        }
    )  # fmt: skip
    summary = run_pipeline(cfg, tmp_path / "run", only=["data", "identify", "numbers"], progress=False)["numbers"]
    paths = RunPaths(tmp_path / "run")
    for name in ("spectra", "probes", "helix", "logit_spectra"):
        assert paths.numbers(name).exists() and paths.numbers(name, ".csv").exists(), name
    assert not paths.numbers("neurons").exists()  # a random model answers nothing: the causal parts are skipped
    # neurons need correct answers (a random model has none); the helix patch runs once identify's share of the
    # facts gives it patch_pairs pairs
    assert set(summary.skipped) <= {"helix patch", "neurons"} and "too few" in summary.skipped["neurons"].problem
    assert "last token" in summary.reading and set(summary.timings) >= {"states", "spectra", "probes", "helix"}
    lines = summary.lines()
    assert any(line.startswith("  skipped neurons: ") and "too few" in line for line in lines)
    assert any(line.startswith("  probe mod 2: ") for line in lines) and "numbers.enabled is false" not in lines[0]
    run_pipeline(cfg, tmp_path / "run", progress=False)  # the rest, to the report: N1-N3 on the card
    card = ClaimsCard.load(paths.claims)
    assert card["N1"].verdict == Verdict.NOT_TESTABLE and card["N1"].beyond_paper  # digit-split, periods 2, 5, 10
    for cid, part in (("N2", "helix patch"), ("N3", "neurons")):  # skipped parts: "not measured", with the reason
        if part in summary.skipped:
            skip = summary.skipped[part]
            assert card[cid].verdict == Verdict.NOT_MEASURED and skip.problem in card[cid].reason, card[cid]
            assert "Fix:" not in card[cid].reason  # the card gives the problem; the stage's summary gives the fix
    assert 'id="numbers"' in paths.report.read_text() and paths.figure("numbers_spectrum").with_suffix(".html").exists()
    off = RunConfig.from_dict({"model": {"source": "tiny-llama"}})
    assert off.numbers.enabled is False


def test_a_neuron_knockout_in_the_flat_format_loads_to_intervals_and_saves_the_same_dict():
    from mathcircuits._codec import decode_fields, encode_fields

    saved = {"n_prompts": 50, "mean_associated": 3.5, "associated_accuracy": 0.1, "associated_low": 0.04,
             "associated_high": 0.21, "random_accuracy": 0.8, "random_low": 0.7, "random_high": 0.9,
             "extra_drop": 0.7, "drop_low": 0.55, "drop_high": 0.82, "n_random": 20}  # fmt: skip
    ko = decode_fields(NeuronKnockout, saved)  # how a NeuronResult reads its nested knockout
    assert ko.associated == Interval(0.1, 0.04, 0.21, 50, method="wilson")
    assert ko.random == Interval(0.8, 0.7, 0.9, 20, method="draw_quantiles")
    assert ko.drop == Interval(0.7, 0.55, 0.82, 50, method="paired_bootstrap")
    again = encode_fields(ko)
    assert again == saved and list(again) == list(saved)
