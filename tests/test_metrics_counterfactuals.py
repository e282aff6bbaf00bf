"""Metrics, counterfactuals, uncertainty: an offset-free default metric over every answer token, the
guarded relative logit, a user's callable metric, the total effect and shares of it, the mixed-operation prefix,
and cluster-bootstrap intervals over templates."""

import dataclasses
import logging

import pytest
import torch

from mathcircuits.data import GenerationConfig, PairError, PairSet, TemplateSet, generate_pairs
from mathcircuits.models import Readout
from mathcircuits.models.embedded import EMBEDDED, weights_note
from mathcircuits.patching import Metric, PatchingResult, SelectionConfig, get_metric, path_patch, select_key_components
from mathcircuits.patching.metrics import METRICS, RELATIVE_MIN_CLEAN
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.bootstrap import MIN_CLUSTERS, bootstrap_mean, cluster_bootstrap_mean, mean_interval


@pytest.fixture(scope="module")
def pairs(tiny_llama, template_sets):
    """Two operations, five templates each (the intervals resample templates within operations: MIN_CLUSTERS)."""
    ids = tuple(f"{op}_{form}" for op in ("add", "mul") for form in ("eq_1", "st_1", "eq_2", "st_2", "eq_3"))
    return generate_pairs(
        tiny_llama.tokenizer,
        template_sets,
        GenerationConfig(operations=("add", "mul"), template_ids=ids, n_per_template=3),
    )


def teacher_forced_logprob(model, prompts, answers) -> torch.Tensor:
    """log p(answer | prompt) by a plain forward of prompt + answer (no cache, no hooks): the reference."""
    out = []
    for p, a in zip(prompts, answers):
        seq = torch.tensor([list(p) + list(a[:-1])])
        logp = torch.log_softmax(model.bridge(seq)[0, -len(a) :].float(), -1)
        out.append(float(logp[torch.arange(len(a)), torch.tensor(a)].sum()))
    return torch.tensor(out)


def test_the_default_metric_is_the_whole_answers_logprob():
    from mathcircuits.patching import PatchingConfig

    assert PatchingConfig().metric == "answer_logprob" and get_metric(PatchingConfig().metric).every_answer_token


def test_offsets_move_the_papers_ratio_but_not_the_default():
    """A constant added to every logit (softmax ignores it) changes relative_logit, not answer_logprob."""
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 3, 13, generator=gen) + 5.0
    answers = torch.randint(0, 13, (4, 3), generator=gen)
    from mathcircuits.patching.metrics import answer_readout

    patched_logits = logits + 0.3 * torch.randn(4, 3, 13, generator=gen)
    clean, patched = answer_readout(logits, answers), answer_readout(patched_logits, answers)
    for c in (3.0, 16.0):  # the same patch, read under two offsets of every raw logit
        clean_c, patched_c = answer_readout(logits + c, answers), answer_readout(patched_logits + c, answers)
        default, ratio = METRICS["answer_logprob"], METRICS["relative_logit"]
        assert torch.allclose(default(patched_c, clean_c), default(patched, clean), atol=1e-5)
        assert not torch.allclose(ratio(patched_c, clean_c), ratio(patched, clean), atol=1e-3)


def test_the_guard_flags_negative_and_near_zero_clean_logits():
    m = METRICS["relative_logit"]
    clean = Readout(torch.tensor([-2.0, 0.0, 0.5, RELATIVE_MIN_CLEAN, 5.0, float("nan")]))
    assert m.excluded(clean).tolist() == [True, True, True, True, False, True]
    assert not METRICS["answer_logprob"].excluded(Readout(clean.logit, clean.logit, clean.logit)).any()
    # why the guard exists: a patch that lowers the answer's logit reads as a *positive* effect when clean < 0
    lowered = Readout(clean.logit - 1.0)
    assert float(m(lowered, clean)[0]) > 0


@pytest.mark.slow
def test_path_patch_excludes_and_counts_the_guarded_pairs(tiny_llama, pairs, caplog):
    with caplog.at_level(logging.WARNING, logger="mathcircuits.patching.driver"):
        res = path_patch(tiny_llama, pairs, metric="relative_logit", keep_per_pair=True)
    clean = torch.tensor(
        [float(tiny_llama.bridge(torch.tensor([t]))[0, -1, a]) for t, a in zip(pairs.tokens, pairs.answer_token)]
    )
    expected = clean <= RELATIVE_MIN_CLEAN
    assert 0 < int(expected.sum()) < len(pairs), "the tiny model has pairs on both sides of the guard"
    assert res.n_excluded == int(expected.sum())
    rows_nan = torch.isnan(res.per_pair_heads).flatten(1).all(1)
    assert rows_nan.tolist() == expected.tolist()
    assert torch.isfinite(res.head_effects).all()  # the means are over the kept pairs
    assert any("excluded" in r.message for r in caplog.records)
    assert "excluded" in dict(res.summary_items())["pairs"]


def test_a_users_callable_metric(tiny_llama, pairs):
    ds = pairs.select(range(6))
    builtin = path_patch(tiny_llama, ds, keep_per_pair=True)
    mine = path_patch(tiny_llama, ds, metric=lambda patched, clean: patched.logprob - clean.logprob, keep_per_pair=True)
    assert mine.metric == "<lambda>"
    assert torch.allclose(mine.per_pair_heads, builtin.per_pair_heads, atol=1e-6)
    first = Metric.custom(lambda p, c: p.logit - c.logit, name="first_logit", target="logit")
    assert torch.allclose(
        path_patch(tiny_llama, ds, metric=first).head_effects,
        path_patch(tiny_llama, ds, metric="logit_diff").head_effects,
        atol=1e-6,
    )
    with pytest.raises(ValueError, match="one effect per row.*Fix|Fix.*one effect per row"):
        path_patch(tiny_llama, ds, metric=lambda p, c: (p.logprob - c.logprob).mean())


@pytest.mark.slow
def test_every_answer_token_is_scored(tiny_llama, pairs):
    """The planted reference: the total effect is log p(answer | cf prompt) − log p(answer | prompt), each from a
    plain teacher-forced forward over every answer token; the patched scan must report exactly that."""
    assert max(len(a) for a in pairs.answer_tokens) > 1, "the test needs multi-token answers"
    res = path_patch(tiny_llama, pairs, keep_per_pair=True)
    clean = teacher_forced_logprob(tiny_llama, pairs.tokens, pairs.answer_tokens)
    cf = teacher_forced_logprob(tiny_llama, pairs.cf_tokens, pairs.answer_tokens)
    assert torch.allclose(res.per_pair_total, cf - clean, atol=1e-4)
    first_only = torch.tensor([len(a) == 1 for a in pairs.answer_tokens])
    assert (~first_only).any()


@pytest.mark.slow
def test_total_effect_of_a_null_counterfactual_is_zero(tiny_llama, pairs):
    same = PairSet(pairs.dataset.map(lambda r: {"cf_tokens": r["tokens"]}))
    res = path_patch(tiny_llama, same, keep_per_pair=True)
    assert res.per_pair_total.abs().max() < 1e-5
    with pytest.raises(ValueError, match="total effect.*Fix"):
        res.head_shares()


@pytest.mark.slow
def test_total_effect_interval_and_shares(tiny_llama, pairs):
    res = path_patch(tiny_llama, pairs, keep_per_pair=True)
    assert res.ci_method == "cluster_bootstrap"  # five templates in each operation
    total = res.total_interval()
    assert total.method == "cluster_bootstrap" and total.low <= total.value <= total.high
    assert total.value == pytest.approx(float(res.per_pair_total.mean()), rel=1e-6)
    share, lo, hi = res.head_shares()
    assert torch.allclose(share, res.head_effects / abs(total.value))
    assert lo is not None and bool((lo <= share + 1e-6).all() and (share - 1e-6 <= hi).all())
    df = res.to_dataframe()
    heads = df[df["kind"] == "head"]
    assert heads["share"].to_numpy() == pytest.approx(share.flatten().numpy(), rel=1e-5, abs=1e-7)
    back = PatchingResult.load(res.save(__import__("tempfile").mkdtemp() + "/p.pt"))
    assert back.total_interval() == total and back.pair_templates == res.pair_templates
    merged = PatchingResult.merge([res, res])
    assert merged.per_pair_total.shape[0] == 2 * len(pairs) and len(merged.pair_templates) == 2 * len(pairs)


def planted_result(tiny_llama, total: float) -> PatchingResult:
    """Head effects planted by hand: L0.H0 = −0.6, L0.H1 = −0.2, the rest −0.01; each pair's total effect ``total``."""
    spec = tiny_llama.spec
    n = 12
    per = torch.full((n, spec.n_layers, spec.n_heads), -0.01)
    per[:, 0, 0], per[:, 0, 1] = -0.6, -0.2
    return PatchingResult(
        head_effects=per.mean(0),
        mlp_effects=torch.zeros(spec.n_layers),
        metric="answer_logprob",
        method="exact",
        model=spec,
        n_pairs=n,
        per_pair_heads=per,
        per_pair_mlps=torch.zeros(n, spec.n_layers),
        per_pair_total=torch.full((n,), total),
        pair_templates=[f"t{i % 3}" for i in range(n)],
        pair_operations=["add"] * n,
    )


def test_fewer_templates_than_the_cluster_bootstrap_needs_fall_back_to_pairs_and_say_so(tiny_llama):
    """Three templates: a cluster bootstrap would undercover (stats.MIN_CLUSTERS), so the pairs are resampled."""
    res = planted_result(tiny_llama, -2.0)
    assert len(set(res.pair_templates)) == 3 < MIN_CLUSTERS
    assert res.ci_method == "bootstrap" and res.total_interval().method == "bootstrap"
    assert res.head_shares()[1] is None  # a share's interval resamples templates: none is claimed over pairs


def test_the_threshold_rule_reads_shares_of_the_total_effect(tiny_llama):
    """−5% of the total effect: with total −2, L0.H0 (−30%) and L0.H1 (−10%) pass; with total −10 only L0.H0."""
    rule = SelectionConfig(rule="threshold", threshold=-0.05)
    assert set(select_key_components(planted_result(tiny_llama, -2.0), rule).heads) == {(0, 0), (0, 1)}
    assert set(select_key_components(planted_result(tiny_llama, -10.0), rule).heads) == {(0, 0)}
    raw = dataclasses.replace(rule, threshold_of="effect")  # the metric's own units: −0.6 and −0.2 < −0.05
    assert set(select_key_components(planted_result(tiny_llama, -10.0), raw).heads) == {(0, 0), (0, 1)}


def test_mixed_prefix_shows_every_operation_and_stays_token_aligned(tiny_llama, template_sets):
    cfg = GenerationConfig(operations=("add", "mul"), template_ids=("add_eq_1", "mul_st_1"), n_per_template=4)
    same = generate_pairs(tiny_llama.tokenizer, template_sets, dataclasses.replace(cfg, fewshot_operations="same"))
    mixed = generate_pairs(tiny_llama.tokenizer, template_sets, dataclasses.replace(cfg, fewshot_operations="mixed"))
    for row_s, row_m in zip(same.dataset, mixed.dataset):
        prefix = row_m["prompt"][: row_m["prompt"].rindex("\n") + 1]
        if row_m["template_id"] == "add_eq_1":
            assert all(f" {op} " in prefix for op in "+-*/")  # every operation's example
            assert not any(f" {op} " in row_s["prompt"].rsplit("\n", 1)[0] for op in "-*/")
        else:
            assert all(w in prefix for w in ("sum", "difference", "product", "quotient"))
        assert len(row_m["tokens"]) == len(row_m["cf_tokens"])
        p = row_m["prefix_len"]
        assert row_m["tokens"][:p] == row_m["cf_tokens"][:p] and row_m["tokens"] != row_m["cf_tokens"]
        op_pos = row_m["pos_op"]
        assert tiny_llama.tokenizer.decode([row_m["tokens"][i] for i in op_pos]).strip() in ("+", "product")
        assert row_m["answer"] == row_s["answer"] and (row_m["a"], row_m["b"]) == (row_s["a"], row_s["b"])
        assert row_m["prompt"].endswith(row_s["prompt"].rsplit("\n", 1)[1])  # the same query


def test_mixed_prefix_without_matching_templates_is_refused(tiny_llama, template_sets):
    """Examples of another operation but no template of it to show them in: refused. A set of one operation has
    nothing to mix, so its mixed prefix is its own examples (the default "mixed" works on every set)."""
    arith = next(s for s in template_sets if any(t.id == "add_eq_1" for t in s.templates))
    only_add = TemplateSet(
        name="only-add",
        description="",
        templates=tuple(t for t in arith.templates if t.operation == "add"),
        counterfactual_vocab=arith.counterfactual_vocab,
        fewshot_examples={"add": arith.fewshot_examples["add"], "mul": arith.fewshot_examples["mul"]},
    )
    cfg = GenerationConfig(template_ids=("add_eq_1",), n_per_template=2, fewshot_operations="mixed")
    with pytest.raises(PairError, match="mixed prefix.*Fix"):
        generate_pairs(tiny_llama.tokenizer, [only_add], cfg)
    alone = dataclasses.replace(only_add, fewshot_examples={"add": arith.fewshot_examples["add"]})
    mixed = generate_pairs(tiny_llama.tokenizer, [alone], cfg)
    same = generate_pairs(tiny_llama.tokenizer, [alone], dataclasses.replace(cfg, fewshot_operations="same"))
    assert mixed.prompts == same.prompts


def test_cluster_bootstrap_is_wider_than_pairs_on_clustered_data():
    """Rows share their template's offset (sd 1) plus small noise (sd 0.1): pairs are not independent."""
    gen = torch.Generator().manual_seed(0)
    clusters, strata, rows = [], [], []
    for op in ("add", "mul"):
        for t in range(4):
            offset = torch.randn(1, generator=gen)
            for _ in range(25):
                rows.append(offset + 0.1 * torch.randn(1, generator=gen))
                clusters.append(f"{op}{t}")
                strata.append(op)
    x = torch.cat(rows)[:, None].repeat(1, 3)  # three cells, each the same column
    lo_c, hi_c = cluster_bootstrap_mean(x, clusters, strata, uncertainty=Uncertainty(n_boot=400))
    lo_i, hi_i = bootstrap_mean(x, uncertainty=Uncertainty(n_boot=400))
    assert bool(((hi_c - lo_c) > 3 * (hi_i - lo_i)).all())
    independent = torch.randn(200, 1, generator=gen)  # no cluster structure: about the same width
    lo_c, hi_c = cluster_bootstrap_mean(independent, clusters, strata, uncertainty=Uncertainty(n_boot=400))
    lo_i, hi_i = bootstrap_mean(independent, uncertainty=Uncertainty(n_boot=400))
    assert 0.5 < float((hi_c - lo_c) / (hi_i - lo_i)) < 2.0
    with pytest.raises(ValueError, match="fewer than two clusters.*Fix"):
        cluster_bootstrap_mean(x[:25], clusters[:25], strata[:25])
    assert (
        mean_interval(x, clusters, strata, uncertainty=Uncertainty(n_boot=50))[2] == "pair_bootstrap_fallback"
    )  # 4 templates an operation: too few
    five = [f"{s}{i % 5}" for i, s in enumerate(strata)]
    assert mean_interval(x, five, strata, uncertainty=Uncertainty(n_boot=50))[2] == "cluster_bootstrap"
    assert (
        mean_interval(x[:50], clusters[:50], ["add"] * 25 + ["mul"] * 25, uncertainty=Uncertainty(n_boot=50))[2]
        == "pair_bootstrap_fallback"
    )  # 1 + 1
    assert mean_interval(x, None, None, uncertainty=Uncertainty(n_boot=50))[2] == "bootstrap"


def test_the_embedded_models_name_their_quantisation():
    assert all(s.weights and ("Q4" in s.weights) for s in EMBEDDED.values())
    assert "Q4_1" in weights_note(EMBEDDED["embedded"].name) and weights_note("tiny-llama") == ""


def test_an_identify_summary_written_before_the_totals_is_refused_with_the_rerun_fix():
    """No format migrations before 1.0: a marker of an older version names what it lacks and says re-run."""
    from mathcircuits.pipeline import stages

    old = {"seconds": 1.3, "correct_pairs": {"add": 8}, "patched_operations": ["add"],
           "results": {"add": {"n_pairs": 8, "seconds": 0.27, "top_heads": [[2, 2, -0.1119]]}},
           "key_heads": [[2, 2]], "key_mlps": [1], "key_head_fraction": 0.25, "rule": "topk",
           "top_heads": [[2, 2, -0.10877]], "stability": [0.795]}  # fmt: skip
    with pytest.raises(ValueError, match=r"lacks field\(s\) \['peak_memory', 'metric', 'totals', 'facts'\]") as err:
        stages()["identify"].summary.from_dict(old)
    assert err.value.fix == "re-run the stage with --force (it was written by another version)"


def test_identify_takes_operand_counterfactuals(tiny_llama, template_sets):
    """data.counterfactual: operands reaches path patching: other operands, the same operator, another answer."""
    cfg = GenerationConfig(operations=("add",), template_ids=("add_eq_1", "add_st_1"), n_per_template=3,
                           counterfactual="operands")  # fmt: skip
    ds = generate_pairs(tiny_llama.tokenizer, template_sets, cfg)
    assert all(c != a for c, a in zip(ds.cf_answers, ds.answers))
    res = path_patch(tiny_llama, ds, keep_per_pair=True)
    assert torch.isfinite(res.head_effects).all() and res.per_pair_total.abs().min() > 0
