"""Analysis stage: attention by token role, head patterns, MLP probes (tiny random model; one slow test on SmolLM2)."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from mathcircuits import FixableError
from mathcircuits.analysis import (
    ROLES,
    AttentionByRole,
    HeadPatterns,
    MLPProbeResult,
    attention_by_role,
    head_patterns,
    mlp_probes,
)
from mathcircuits.analysis.mlp_probes import number_tokens
from mathcircuits.analysis.roles import classify_heads, role_masks, role_shares, sink_mask
from mathcircuits.models import Head
from mathcircuits.stats import Uncertainty

from helpers import unchecked


@pytest.fixture(scope="module")
def tiny(tiny_llama):
    return tiny_llama


@pytest.fixture(scope="module")
def pairs(tiny, template_sets):
    from mathcircuits.data import GenerationConfig, generate_pairs

    cfg = GenerationConfig(
        operations=("add", "sub"), template_ids=("add_eq_1", "add_qa_1", "sub_eq_1"), n_per_template=2
    )
    return generate_pairs(tiny.tokenizer, template_sets, cfg)


# ---------------------------------------------------------------- roles on handmade examples


def test_role_masks_assign_one_role_per_position():
    # positions: 0-2 prefix, 3 'x', 4 A, 5 op, 6 ' ', 7-8 B (two tokens), 9 last
    m = role_masks(10, 3, [4], [7, 8], [5])
    assert m.shape == (len(ROLES), 10)
    assert m.sum(0).tolist() == [1] * 10
    got = {ROLES[r]: m[r].nonzero().flatten().tolist() for r in range(len(ROLES))}
    assert got == {"operand_a": [4], "operand_b": [7, 8], "operator": [5], "prefix": [0, 1, 2], "other": [3, 6, 9]}


@pytest.mark.parametrize(
    "args, words",
    [
        ((10, 3, [4], [4], [5]), "two roles"),
        ((10, 3, [2], [7], [5]), "outside the query"),
        ((10, 3, [4], [7], []), "is empty"),
    ],
)
def test_role_masks_refuse_bad_positions(args, words):
    with pytest.raises(ValueError, match=words) as err:
        role_masks(*args)
    assert isinstance(err.value, FixableError) and err.value.fix


def test_role_shares_and_classification_on_handmade_patterns():
    masks = role_masks(10, 3, [4], [7, 8], [5])
    operand_head = torch.zeros(10)
    operand_head[[4, 7, 8]] = torch.tensor([0.2, 0.3, 0.2])
    operand_head[0] = 0.3
    operator_head = torch.zeros(10)
    operator_head[5], operator_head[0] = 0.6, 0.4
    uniform = torch.full((10,), 0.1)
    rows = torch.stack([operand_head, operator_head, uniform])
    shares = role_shares(rows, masks)
    assert torch.allclose(shares.sum(-1), torch.ones(3))
    assert shares[0].tolist() == pytest.approx([0.2, 0.5, 0.0, 0.3, 0.0])
    baselines = (masks.float().sum(1) / 10)[None]
    assert classify_heads(shares[None], baselines) == ("operand", "operator", "neither")
    # the uniform head has lift 1 everywhere, so no threshold on share alone can make it an operand head
    assert classify_heads(shares[None], baselines, min_share=0.0, min_lift=1.5)[2] == "neither"


def test_sink_is_the_prefix_or_an_unroled_first_token():
    assert sink_mask(role_masks(10, 3, [4], [7, 8], [5])).nonzero().flatten().tolist() == [0, 1, 2]
    assert sink_mask(role_masks(6, 0, [2], [4], [3])).nonzero().flatten().tolist() == [0]  # e.g. <s>
    assert not sink_mask(role_masks(6, 0, [0], [4], [2])).any()  # the first token is operand A: no sink


def test_sink_free_shares_renormalise_the_attention_off_the_sink(tiny, tmp_path):
    # one pair, two heads over roles A, B, op, prefix, other: head 0 parks 90% on the prefix, head 1 all of it
    shares = torch.tensor([[[0.05, 0.0, 0.025, 0.9, 0.025], [0.0, 0.0, 0.0, 1.0, 0.0]]])
    base = torch.tensor([[0.1, 0.1, 0.1, 0.5, 0.2]])
    res = AttentionByRole(
        heads=(Head(0, 0), Head(0, 1)), shares=shares, baselines=base, operations=["add"], pair_ids=[0],
        template_ids=["t"], model=tiny.spec, sink=shares[..., 3], sink_baselines=base[:, 3],
    )  # fmt: skip
    sf, b = res.sink_free()
    assert sf[0, 0].tolist() == pytest.approx([0.5, 0.25]) and b[0].tolist() == pytest.approx([0.4, 0.2])
    assert torch.isnan(sf[0, 1]).all()  # all on the sink: nothing left to share out
    assert AttentionByRole.load(res.save(tmp_path / "a.pt")).sink is not None
    unmeasured = AttentionByRole(**{**res.__dict__, "sink": None, "sink_baselines": None})
    with pytest.raises(ValueError, match="re-run analyze"):
        unmeasured.sink_free()


# ---------------------------------------------------------------- attention by role on the tiny model


def test_attention_by_role_matches_the_cached_pattern(tiny, pairs):
    heads = [(0, 1), (2, 3), (1, 0)]
    res = attention_by_role(tiny, pairs, heads, batch_size=4)
    n = len(pairs)
    assert res.shares.shape == (n, 3, len(ROLES))
    assert torch.allclose(res.shares.sum(-1), torch.ones(n, 3), atol=1e-5)
    assert torch.allclose(res.baselines.sum(-1), torch.ones(n), atol=1e-6)
    # recompute pair 3, head (2, 3) by hand from the full cached pattern
    row = pairs.dataset[3]
    _, cache = tiny.bridge.run_with_cache(
        torch.tensor([row["tokens"]]), names_filter=lambda name: name == "blocks.2.attn.hook_pattern"
    )
    last = cache["blocks.2.attn.hook_pattern"][0, 3, -1]
    expected_a = float(last[row["pos_a"]].sum())
    expected_prefix = float(last[: row["prefix_len"]].sum())
    assert float(res.shares[3, 1, ROLES.index("operand_a")]) == pytest.approx(expected_a, abs=1e-6)
    assert float(res.shares[3, 1, ROLES.index("prefix")]) == pytest.approx(expected_prefix, abs=1e-6)
    sink = sink_mask(role_masks(row["n_tokens"], row["prefix_len"], row["pos_a"], row["pos_b"], row["pos_op"]))
    assert float(res.sink[3, 1]) == pytest.approx(float(last[sink].sum()), abs=1e-6)
    assert float(res.sink_baselines[3]) == pytest.approx(float(sink.float().mean()))
    assert res.operations == list(pairs.operations)
    assert set(res.classify()) <= {"operand", "operator", "neither"}


def test_attention_by_role_tables_and_round_trip(tiny, pairs, tmp_path):
    res = attention_by_role(tiny, pairs, [(0, 1), (2, 3)])
    summary = res.summary()
    assert set(summary["operation"]) == {"all", "add", "sub"}
    assert {"operand_a", "operator", "lift_operands", "lift_operator", "class"} <= set(summary.columns)
    # each mean share and each excess over the uniform baseline carries its bootstrap interval
    for col in ("operand_a", "operator", "operands", "excess_operands", "excess_operator"):
        assert (summary[f"{col}_low"] <= summary[col] + 1e-6).all() and (
            summary[col] <= summary[f"{col}_high"] + 1e-6
        ).all()
    overall = summary[summary.operation == "all"]
    expected = (res.shares[..., 0] + res.shares[..., 1] - res.baselines[:, None, 0] - res.baselines[:, None, 1]).mean(0)
    assert overall.excess_operands.tolist() == pytest.approx(expected.tolist(), abs=1e-6)
    reseeded = res.summary(uncertainty=Uncertainty(seed=3))
    assert reseeded.excess_operands_low.tolist() != summary.excess_operands_low.tolist()  # seeded
    roles = res.head_roles()  # the typed rows: each head's class and excess intervals, as the summary's "all" rows
    assert [r.head for r in roles] == list(res.heads) and [r.head_class for r in roles] == list(overall["class"])
    assert [r.excess_operator.high for r in roles] == overall.excess_operator_high.tolist()
    assert roles[0].excess_operands.value == overall.excess_operands.iloc[0] and roles[0].excess_operands.n == len(
        pairs
    )
    assert roles[0].excess_operands.method == overall.interval.iloc[0]
    df = res.to_dataframe()
    assert len(df) == len(pairs) * 2 * len(ROLES)
    assert df.groupby(["pair_id", "component"])["attention"].sum().round(4).eq(1).all()
    back = AttentionByRole.load(res.save(tmp_path / "att.pt"))
    assert back.heads == res.heads and torch.equal(back.shares, res.shares) and back.operations == res.operations
    with pytest.raises(KeyError, match="mul"):
        res.mean("mul")


def test_attention_by_role_accepts_key_components_and_refuses_bad_heads(tiny, pairs):
    from mathcircuits.patching import KeyComponents

    key = KeyComponents(model=tiny.spec, heads=(Head(1, 2),))
    assert attention_by_role(tiny, pairs, key).heads == ((1, 2),)
    with pytest.raises(IndexError, match="out of range"):
        attention_by_role(tiny, pairs, [(7, 0)])
    other = KeyComponents(model=dataclasses.replace(tiny.spec, name="another"), heads=(Head(1, 2),))
    with pytest.raises(ValueError, match="another"):
        attention_by_role(tiny, pairs, other)


def test_head_patterns_keep_full_rows_and_roles(tiny, pairs, tmp_path):
    pats = head_patterns(tiny, pairs, [(0, 1), (2, 3)], rows=[0, 2])
    assert isinstance(pats, HeadPatterns)
    for k, r in enumerate([0, 2]):
        n_tok = pairs.n_tokens[r]
        assert pats.patterns[k].shape == (2, n_tok, n_tok)
        assert torch.allclose(pats.patterns[k].sum(-1), torch.ones(2, n_tok), atol=1e-5)
        assert len(pats.tokens[k]) == len(pats.roles[k]) == n_tok
        assert pats.roles[k][pairs.pos_op[r][0]] == "operator"
    short = head_patterns(tiny, pairs, [(0, 1)], rows=[0], drop_prefix=True)
    assert short.patterns[0].shape[-1] == pairs.n_tokens[0] - pairs.prefix_len[0]
    assert "prefix" not in short.roles[0]
    back = HeadPatterns.load(pats.save(tmp_path / "p.pt"))
    assert back.tokens == pats.tokens and torch.equal(back.patterns[1], pats.patterns[1])
    with pytest.raises(IndexError, match="out of range"):
        head_patterns(tiny, pairs, [(0, 1)], rows=[len(pairs)])


# ---------------------------------------------------------------- MLP probes on the tiny model


def test_mlp_update_is_resid_post_minus_resid_mid(tiny, pairs):
    _, cache = tiny.bridge.run_with_cache(torch.tensor([pairs.tokens[0]]))
    for layer in range(tiny.spec.n_layers):
        diff = cache[f"blocks.{layer}.hook_resid_post"] - cache[f"blocks.{layer}.hook_resid_mid"]
        assert torch.allclose(diff, cache[f"blocks.{layer}.hook_mlp_out"], atol=1e-5)


def test_mlp_probes_shapes_ranges_and_logit_lens(tiny, pairs):
    res = mlp_probes(tiny, pairs, case_row=1, top_k=3)
    n, n_layers = len(pairs), tiny.spec.n_layers
    for name in (
        "input_sim_a",
        "input_sim_b",
        "input_sim_answer",
        "input_sim_others",
        "update_sim_answer",
        "update_sim_others",
    ):
        t = getattr(res, name)
        assert t.shape == (n, n_layers)
        assert t.abs().max() <= 1 + 1e-5
    # the logit lens after the last layer is the model's output
    logits = torch.cat([tiny(torch.tensor([t]))[:, -1] for t in pairs.tokens])
    ans = torch.tensor(pairs.answer_token)
    true_rank = (logits > logits.gather(1, ans[:, None])).sum(1).float()
    assert torch.equal(res.lens_rank[:, -1], true_rank)
    assert torch.allclose(res.lens_prob[:, -1], torch.softmax(logits, -1).gather(1, ans[:, None])[:, 0], atol=1e-5)
    assert res.case_top_number_scores.shape == (n_layers, 3)
    assert len(res.case_top_numbers) == len(res.case_top_tokens) == len(res.case_lens_top) == n_layers
    assert (res.case_top_number_scores[:, :-1] >= res.case_top_number_scores[:, 1:]).all()
    assert res.candidate_texts == [str(i) for i in range(10)]
    assert res.case_answer_label == pairs.answers[1][0]


@contextlib.contextmanager
def _random_norm_gains(model):
    """Give every RMSNorm a random gain, then restore it.

    The tiny model's gains are all ones, which would hide a missing gain.
    """
    norms = [model.bridge.ln_final.original_component] + [blk.ln2.original_component for blk in model.bridge.blocks]
    saved = [n.weight.detach().clone() for n in norms]
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for n in norms:
            n.weight.copy_(torch.rand(n.weight.shape, generator=gen) * 2 + 0.1)
    try:
        yield
    finally:
        with torch.no_grad():
            for n, w in zip(norms, saved):
                n.weight.copy_(w)


def test_mlp_probes_lens_space_equals_effective_unembedding(tiny, pairs):
    """For RMSNorm, cos(LN_f(x), W_U[:, t]) = cos(g * x, W_U[:, t]): the lens space folds the final gain in."""
    with _random_norm_gains(tiny):
        res = mlp_probes(tiny, pairs, space="lens")
        raw = mlp_probes(tiny, pairs, space="raw")
        row = pairs.dataset[0]
        with torch.no_grad():
            _, cache = tiny.bridge.run_with_cache(
                torch.tensor([row["tokens"]]), names_filter=lambda name: name.endswith("hook_resid_mid")
            )
            g = tiny.bridge.ln_final.original_component.weight
            tok_a = number_tokens(tiny.tokenizer, [row["a"]], row["prompt"])[0]
            x = cache["blocks.1.hook_resid_mid"][0, -1]
            expected = F.cosine_similarity(g * x, tiny.bridge.W_U[:, tok_a], dim=0)
            without_gain = F.cosine_similarity(x, tiny.bridge.W_U[:, tok_a], dim=0)
    assert float(res.input_sim_a[0, 1]) == pytest.approx(float(expected), abs=1e-5)
    assert float(res.input_sim_a[0, 1]) != pytest.approx(float(without_gain), abs=1e-3)
    assert not torch.allclose(
        raw.input_sim_a, res.input_sim_a, atol=1e-3
    )  # raw reads ln2's output, with ln2's own gain
    assert torch.equal(raw.lens_rank, res.lens_rank)  # the space only changes the cosines


def test_mlp_probes_tables_round_trip_and_errors(tiny, pairs, tmp_path):
    res = mlp_probes(tiny, pairs)
    assert len(res.to_dataframe()) == len(pairs) * tiny.spec.n_layers
    summary = res.layer_summary("add")
    assert len(summary) == tiny.spec.n_layers and set(summary["operation"]) == {"add"}
    assert len(res.case_dataframe()) == tiny.spec.n_layers
    back = MLPProbeResult.load(res.save(tmp_path / "probe.pt"))
    assert (
        torch.equal(back.update_direct_margin, res.update_direct_margin)
        and back.case_top_numbers == res.case_top_numbers
    )
    first = res.first_raising_layer(min_margin=-1e9)
    assert first == 0
    # intervals: bootstrap on the mean margin, Wilson on the top-1 share, and on the layers themselves
    assert (summary.update_direct_margin_low <= summary.update_direct_margin + 1e-6).all()
    assert (summary.update_direct_margin <= summary.update_direct_margin_high + 1e-6).all()
    assert (summary.lens_top1_low <= summary.lens_top1 + 1e-9).all() and (summary.lens_top1_high <= 1).all()
    for which, fn in (("raising", res.first_raising_layer), ("lens_top1", res.lens_top1_layer)):
        iv = res.layer_interval(which, uncertainty=Uncertainty(n_boot=100))
        got = fn()
        assert iv.value == (tiny.spec.n_layers if got is None else got) and iv.low <= iv.value <= iv.high
        assert iv.n == len(pairs)
    with pytest.raises(ValueError, match="which"):
        res.layer_interval("first")
    with unchecked(), pytest.raises(ValueError, match="space"):
        mlp_probes(tiny, pairs, space="ln")
    with pytest.raises(IndexError, match="case_row"):
        mlp_probes(tiny, pairs, case_row=999)


def test_mlp_probes_and_roles_on_gpt2_layernorm(tiny_gpt2, template_sets):
    """GPT-2 (LayerNorm, learned positions, answers carry their space): the lens after the last layer is the output."""
    from mathcircuits.data import GenerationConfig, generate_pairs

    ds = generate_pairs(
        tiny_gpt2.tokenizer,
        template_sets,
        GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=3),
    )
    res = mlp_probes(tiny_gpt2, ds)
    logits = torch.cat([tiny_gpt2(torch.tensor([t]))[:, -1] for t in ds.tokens])
    ans = torch.tensor(ds.answer_token)
    assert torch.equal(res.lens_rank[:, -1], (logits > logits.gather(1, ans[:, None])).sum(1).float())
    att = attention_by_role(tiny_gpt2, ds, [(0, 1), (1, 3)])
    assert torch.allclose(att.shares.sum(-1), torch.ones(len(ds), 2), atol=1e-5)


def test_mlp_probes_case_by_prompt_end(tiny, pairs):
    end = pairs.prompts[4][-8:]
    row = next(i for i, p in enumerate(pairs.prompts) if p.endswith(end))
    assert mlp_probes(tiny, pairs, case_row=end).case_row == row
    with pytest.raises(ValueError, match="no prompt ends with"):
        mlp_probes(tiny, pairs, case_row="9 ^ 9 = ")


def test_number_tokens_take_the_first_token(tiny):
    toks = number_tokens(tiny.tokenizer, [7, 12], "3 + 4 = ")
    assert toks == tiny.tokenizer.convert_tokens_to_ids(["7", "1"])


# ---------------------------------------------------------------- the embedded model


@pytest.mark.slow
def test_embedded_operand_and_operator_heads(embedded, embedded_add_pairs):
    """On SmolLM2, L14.H2 reads the operands and L13.H6 the operator (addition, equation template)."""
    model = embedded
    ok = embedded_add_pairs.shuffle(seed=0).select(range(min(24, len(embedded_add_pairs))))
    assert len(ok) >= 8
    res = attention_by_role(model, ok, [(14, 2), (13, 6), (14, 1)])
    assert res.classify() == ("operand", "operator", "neither")
    probes = mlp_probes(model, ok)
    assert (probes.lens_rank[:, -1] == 0).all()  # correct pairs: the answer is the model's top-1
    half = model.spec.n_layers // 2
    assert probes.lens_top1_layer() >= half  # the answer surfaces in the second half of the network
    margin = probes.update_direct_margin.mean(0)
    assert margin[half:].sum() > 1.0 and margin[half:].sum() > 2 * margin[:half].sum()  # ... raised mostly by late MLPs
