"""Tests of mathcircuits.ablation: mean ablation, knockout curves, transfer.

The knockout tests run on a tiny Llama with a *planted circuit*: weights set by hand so
that the answer (a copy of the one digit in the prompt) reaches the logits through two
known heads only, while the other heads and the MLPs write noise elsewhere.
"""

import inspect
import math
import random
import warnings

import pytest
import torch

from mathcircuits.ablation import (
    HeadMeans,
    KnockoutResult,
    KnockoutScorer,
    TransferResult,
    ablated_accuracy,
    ablated_model,
    head_means,
    knockout_curve,
    transfer,
)
from mathcircuits.ablation.hooks import mean_ablation_hooks
from mathcircuits.data import GenerationConfig, PairSet, generate_pairs, score_pairs
from mathcircuits.data.tokenizer_id import tokenizer_fingerprint
from mathcircuits.models import load_model
from mathcircuits.patching import path_patch, select_key_components
from mathcircuits.patching.key_components import resolve_heads
from mathcircuits.stats import Interval

from helpers import unchecked

PLANTED = [(1, 2), (2, 1)]  # (layer, head) of the two heads that copy the digit to the last position


@pytest.fixture(scope="module")
def pairs(tiny_llama, template_sets):
    config = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=6)
    return generate_pairs(tiny_llama.tokenizer, template_sets, config)


def _plant_copy_circuit(model) -> None:
    """Overwrite a tiny Llama (3 layers, 4 heads, 2 KV heads, d_model 64) with a digit-copying circuit.

    Residual dims: 0-9 the digit's identity, 10 "is a digit", 63 a constant; 20-29 the answer
    (read by the unembedding); 30-59 noise. Each planted head queries with the constant and keys
    on "is a digit" in the slowest rotary pair (so attention is by content, not position), reads
    the digit's identity and writes it into the answer dims. Every other head and MLP is random
    but writes only into the noise dims, which the unembedding ignores (they change the norm only).
    """
    params = {n.replace("._original_component", ""): p for n, p in model.hf_model.named_parameters()}
    spec = model.spec
    dh, group = spec.d_head, spec.n_heads // spec.n_kv_heads
    slow = dh // 2 - 1  # the rotary pair (slow, slow + dh/2) turns by < 0.01 rad over these prompts
    digits = model.tokenizer.convert_tokens_to_ids(list("0123456789"))
    gen = torch.Generator().manual_seed(0)
    noise = slice(30, 60)

    def rand(*shape):
        return torch.randn(*shape, generator=gen) * 0.3

    with torch.no_grad():
        for name, p in params.items():
            p.copy_(torch.ones_like(p) if name.endswith("norm.weight") else torch.zeros_like(p))
        emb = params["model.embed_tokens.weight"]
        emb[:, 63] = 1.0
        for j, t in enumerate(digits):
            emb[t, j] = emb[t, 10] = 1.0
            params["lm_head.weight"][t, 20 + j] = 3.0
        for layer in range(spec.n_layers):
            pre = f"model.layers.{layer}."
            q, k, v, o = (params[f"{pre}self_attn.{x}_proj.weight"] for x in "qkvo")
            planted_groups = {h // group for l, h in PLANTED if l == layer}
            for h in range(spec.n_heads):
                g, rows = h // group, slice(h * dh, (h + 1) * dh)
                if (layer, h) in PLANTED:
                    q[h * dh + slow, 63] = 4.0
                    k[g * dh + slow, 10] = 4.0
                    for j in range(10):
                        v[g * dh + j, j] = 1.0
                        o[20 + j, h * dh + j] = 1.0
                    continue
                q[rows] = rand(dh, spec.d_model)
                o[noise, rows] = rand(30, dh)
                if g not in planted_groups:  # K/V are shared by the heads of a group
                    k[g * dh : (g + 1) * dh] = rand(dh, spec.d_model)
                    v[g * dh : (g + 1) * dh] = rand(dh, spec.d_model)
            params[f"{pre}mlp.gate_proj.weight"].copy_(rand(spec.d_mlp, spec.d_model))
            params[f"{pre}mlp.up_proj.weight"].copy_(rand(spec.d_mlp, spec.d_model))
            params[f"{pre}mlp.down_proj.weight"][noise] = rand(30, spec.d_mlp)


def _copy_pairs(tokenizer, n: int = 24, seed: int = 0):
    """Prompts like ``"cah7bd="`` whose answer is their one digit; the counterfactual has another digit."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        d, other = rng.sample(range(10), 2)
        pre, post = "".join(rng.choices("abcdefghij", k=3)), "".join(rng.choices("abcdefghij", k=2))
        prompt, cf = f"{pre}{d}{post}=", f"{pre}{other}{post}="
        ids, cf_ids = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in (prompt, cf))
        answer = tokenizer(str(d), add_special_tokens=False)["input_ids"]
        rows.append(
            {
                "prompt": prompt,
                "cf_prompt": cf,
                "answer": str(d),
                "tokens": ids,
                "cf_tokens": cf_ids,
                "answer_token": answer[0],
                "answer_tokens": answer,
                "n_tokens": len(ids),
                "operation": "copy",
                "pair_id": i,
                "tokenizer": tokenizer_fingerprint(tokenizer),  # pairs carry their tokenizer (PairSet.require_model)
            }
        )
    return PairSet.from_rows(rows)


@pytest.fixture(scope="module")
def planted():
    model = load_model("tiny-llama")
    _plant_copy_circuit(model)
    ds = _copy_pairs(model.tokenizer)
    with torch.no_grad():  # the bridge runs the edited HF weights
        tokens = torch.tensor(ds.tokens)
        assert torch.allclose(model(tokens), model.hf_model(tokens).logits, atol=1e-5)
    return model, ds, path_patch(model, ds)


def test_head_means_are_means_of_counterfactual_z(tiny_llama, pairs):
    means = head_means(tiny_llama, pairs)
    assert means.means.shape == (3, 4, 16)
    toks = torch.tensor(pairs.cf_tokens)
    _, cache = tiny_llama.bridge.run_with_cache(toks)
    expected = cache["blocks.1.attn.hook_z"].mean(dim=(0, 1))
    assert torch.allclose(means.means[1], expected, atol=1e-5)


def test_ablation_replaces_only_chosen_heads(tiny_llama, pairs):

    means = head_means(tiny_llama, pairs)
    toks = torch.tensor(pairs.tokens[:2])
    _, clean = tiny_llama.bridge.run_with_cache(toks)
    seen = {}

    def grab(act, hook):
        seen["z"] = act.clone()

    hooks = mean_ablation_hooks(tiny_llama, [(1, 2)], means, "all") + [("blocks.1.attn.hook_z", grab)]
    tiny_llama.bridge.run_with_hooks(toks, fwd_hooks=hooks)
    z, z0 = seen["z"], clean["blocks.1.attn.hook_z"]
    assert torch.allclose(z[:, :, 2], means.means[1, 2].expand_as(z[:, :, 2]))
    assert torch.allclose(z[:, :, [0, 1, 3]], z0[:, :, [0, 1, 3]])
    out = tiny_llama.bridge(toks)
    assert not torch.allclose(ablated_model(tiny_llama, [(1, 2)], means)(toks), out)
    assert torch.allclose(ablated_model(tiny_llama, [], means)(toks), out)


def test_knockout_curve_is_ablated_accuracy_in_rank_order(planted, tmp_path):
    model, ds, res = planted
    ko = knockout_curve(model, ds, res, max_k=3, n_random=2, ablation="mean")
    means = head_means(model, ds)
    assert ko.ks == [0, 1, 2, 3] and ko.random_accuracy.shape == (2, 4)
    assert ko.ranked_heads == [(l, h) for l, h, _ in res.top_heads(3)]
    # each point of the ranked curve is the accuracy with exactly the first k ranked heads knocked out
    for k, acc in zip(ko.ks, ko.ranked_accuracy):
        assert acc == pytest.approx(ablated_accuracy(model, ds, ko.ranked_heads[:k], means))
    clean = sum(score_pairs(model, ds).correct) / len(ds)
    assert ko.baseline_accuracy == clean == 1.0
    assert torch.all(ko.random_accuracy[:, 0] == clean)
    assert ko.ranked_accuracy[2] < ko.ranked_accuracy[1], "the second planted head completes the knockout"
    back = KnockoutResult.load(ko.save(tmp_path / "ko.pt"))
    assert back.ranked_accuracy == ko.ranked_accuracy and torch.equal(back.random_accuracy, ko.random_accuracy)
    assert {"k", "ranked_accuracy", "ranked_low", "ranked_high", "random_mean"} <= set(back.to_dataframe().columns)


def test_knockout_curve_on_a_given_scorer_equals_its_own_and_refuses_another_ablation(planted):
    model, ds, res = planted
    scorer = KnockoutScorer(model, ds, "mean")
    scorer.accuracy([res.top_heads(1)[0][:2]])  # a scorer already used (its clean runs kept) gives the same curve
    ko = knockout_curve(model, ds, res, max_k=3, n_random=2, ablation="mean", scorer=scorer)
    own = knockout_curve(model, ds, res, max_k=3, n_random=2, ablation="mean")
    assert ko.ranked_accuracy == own.ranked_accuracy and torch.equal(ko.random_accuracy, own.random_accuracy)
    assert ko.ranked_accuracy[-1] < ko.baseline_accuracy  # the curve falls, so equal curves say something
    with pytest.raises(ValueError, match="scorer of ablation 'mean'"):
        knockout_curve(model, ds, res, max_k=3, ablation="resample", scorer=scorer)


def test_planted_circuit_is_found_and_its_knockout_hurts_more_than_random_heads(planted):
    model, ds, res = planted
    means = head_means(model, ds)
    others = [(l, h) for l in range(model.spec.n_layers) for h in range(model.spec.n_heads) if (l, h) not in PLANTED]
    # the construction: the answer flows through the planted heads only
    assert ablated_accuracy(model, ds, others, means) == 1.0
    assert ablated_accuracy(model, ds, [PLANTED[0]], means) == 1.0, "each planted head alone carries the answer"
    # path patching ranks exactly the planted heads first
    assert {(l, h) for l, h, _ in res.top_heads(2)} == set(PLANTED)
    ko = knockout_curve(model, ds, res, max_k=2, n_random=5, seed=0, ablation="mean")
    ranked, random_k = ko.ranked_accuracy[2], ko.random_accuracy[:, 2]
    assert ranked <= 0.3, f"knocking out the two top heads leaves accuracy {ranked}"
    assert ranked < float(random_k.min()) and float(random_k.mean()) >= 0.9


def test_knockout_curve_takes_key_components_and_refuses_other_types(planted):
    model, ds, res = planted
    key = select_key_components(res, rule="topk", k=2)
    by_key = knockout_curve(model, ds, key, max_k=5, n_random=1, ablation="mean")
    assert by_key.ranked_heads == [tuple(h) for h in key.heads] and by_key.ks == [0, 1, 2]
    by_result = knockout_curve(model, ds, res, max_k=2, n_random=1, ablation="mean")
    assert by_key.ranked_accuracy[2] == by_result.ranked_accuracy[2] <= 0.3
    # past the call's argument check and the type checker pytest adds (either refuses first, naming the parameter)
    inner = inspect.unwrap(knockout_curve)
    with pytest.raises(TypeError, match=r"knockout_curve\(patching=\) got a list.*PatchingResult.*KeyComponents"):
        inner(model, ds, [(1, 2)], max_k=1)
    resolve = inspect.unwrap(resolve_heads)
    with pytest.raises(TypeError, match=r"key_heads got a PatchingResult.*select_key_components"):
        resolve(res, model.spec, arg="key_heads")


def test_knockout_on_the_pairs_that_ranked_the_heads_warns(planted):
    model, ds, res = planted
    half = len(ds) // 2
    first = path_patch(model, ds.select(range(half)))
    with pytest.warns(UserWarning, match=rf"scores {half} of {len(ds)} pairs.*fresh_pairs"):
        knockout_curve(model, ds, first, max_k=1, n_random=1, ablation="mean")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pairs the ranking never saw: no warning
        knockout_curve(model, ds.select(range(half, len(ds))), first, max_k=1, n_random=1, ablation="mean")


def _max_diff(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


@pytest.mark.parametrize("scope", ["all", "last"])
def test_resampling_from_the_prompt_itself_is_a_no_op(tiny_llama, pairs, scope):
    scorer = KnockoutScorer(tiny_llama, pairs, "resample", scope=scope, source_column="tokens")
    donors = [scorer.donor[i] for i in range(len(pairs))]
    assert donors != list(range(len(pairs)))  # donors are other prompts of the group ...
    same = PairSet.from_rows([pairs.dataset[0]] * 6)  # ... so use a set of one repeated prompt
    scorer = KnockoutScorer(tiny_llama, same, "resample", scope=scope, source_column="tokens")
    heads = [(0, 1), (1, 2), (2, 3)]
    assert _max_diff(scorer.logits(heads, fast=False), scorer.logits([])) <= 1e-5
    # the same heads resampled from the real counterfactuals do change the logits
    cf = KnockoutScorer(tiny_llama, pairs, "resample", scope=scope)
    assert _max_diff(cf.logits(heads, fast=False), cf.logits([])) > 1e-4


def test_position_mean_of_identical_prompts_is_a_no_op(tiny_llama, pairs):
    same = PairSet.from_rows([pairs.dataset[2]] * 5)
    scorer = KnockoutScorer(tiny_llama, same, "position_mean", source_column="tokens")
    heads = [(0, 0), (1, 2), (2, 1)]
    assert _max_diff(scorer.logits(heads, fast=False), scorer.logits([])) <= 1e-5
    # and the position-free mean of the same prompts is not a no-op (it averages over positions)
    mean = KnockoutScorer(tiny_llama, same, "mean", means=head_means(tiny_llama, same, column="tokens"))
    assert _max_diff(mean.logits(heads, fast=False), mean.logits([])) > 1e-4


def test_position_mean_is_the_mean_of_aligned_counterfactual_z(tiny_llama, pairs):
    scorer = KnockoutScorer(tiny_llama, pairs, "position_mean")
    group = max(scorer.groups, key=lambda g: len(g.rows))
    toks = torch.tensor([scorer.sources[i] for i in group.rows])
    _, cache = tiny_llama.bridge.run_with_cache(toks, names_filter=lambda n: n.endswith("hook_z"))
    want = cache["blocks.1.attn.hook_z"].mean(0)  # [pos, head, d_head], per aligned position
    got = scorer.replacement_z(scorer.groups.index(group))[0, :, 1]
    assert torch.allclose(got, want, atol=1e-6)
    assert group.shared >= 4  # and on the shared prefix it is the clean activation, so the fast path skips it
    _, clean = tiny_llama.bridge.run_with_cache(toks[:1], names_filter=lambda n: n.endswith("hook_z"))
    assert torch.allclose(want[: group.shared], clean["blocks.1.attn.hook_z"][0, : group.shared], atol=1e-5)


def test_resample_donors_are_seeded_and_stay_in_their_group(tiny_llama, pairs):
    a, b = (KnockoutScorer(tiny_llama, pairs, "resample", seed=s) for s in (0, 0))
    c = KnockoutScorer(tiny_llama, pairs, "resample", seed=1)
    assert a.donor == b.donor and a.donor != c.donor
    for group in a.groups:
        assert {a.donor[i] for i in group.rows} == set(group.rows)  # a permutation within the group


@pytest.mark.parametrize("ablation", ["position_mean", "resample"])
def test_planted_circuit_knockout_with_aligned_ablations(planted, ablation):
    model, ds, res = planted
    ko = knockout_curve(model, ds, res, max_k=2, n_random=3, seed=0, ablation=ablation, ks=[2])
    assert ko.ks == [0, 2] and ko.ablation == ablation
    # a random pair of heads may hold one planted head (a resampled donor's digit then competes), but not all do
    assert ko.ranked_accuracy[1] <= 0.3 and float(ko.random_accuracy[:, 1].max()) >= 0.9


def test_knockout_rejects_unknown_ablation_and_bad_ks(planted):
    model, ds, res = planted
    with unchecked(), pytest.raises(ValueError, match="ablation"):
        knockout_curve(model, ds, res, max_k=2, ablation="zero")
    with pytest.raises(TypeError, match="ablation"):  # a type checker refuses it first
        knockout_curve(model, ds, res, max_k=2, ablation="zero")
    with pytest.raises(ValueError, match="ks"):
        knockout_curve(model, ds, res, max_k=2, ks=[5])


def test_transfer_on_a_near_chance_model_is_not_measurable(tiny_llama, pairs, template_sets):
    means = head_means(tiny_llama, pairs)
    config = GenerationConfig(operations=("mul",), template_ids=("mul_eq_1",), n_per_template=4)
    other = generate_pairs(tiny_llama.tokenizer, template_sets, config)
    tr = transfer(tiny_llama, {"add": pairs, "mul": other}, [(0, 1), (2, 3)], means, n_random=2, ablation="mean")
    df = tr.to_dataframe()
    assert list(df["dataset"]) == ["add", "mul"]
    for row in tr.rows:  # the random tiny model answers (almost) nothing, so no transfer is reported
        clean = sum(score_pairs(tiny_llama, pairs if row.dataset == "add" else other).correct)
        assert row.n_correct == clean and row.clean.low - 1e-12 <= row.clean.value <= row.clean.high
        assert row.status == "not measurable on this model" and math.isnan(row.key.value)
    with pytest.raises(IndexError):
        ablated_accuracy(tiny_llama, pairs, [(7, 0)], means)


@pytest.mark.slow
def test_transfer_is_measured_on_clean_correct_items_only(planted):
    model, ds, _ = planted
    means = head_means(model, ds)
    digit = {model.tokenizer.convert_tokens_to_ids(str(d)): d for d in range(10)}
    wrong = PairSet(
        ds.dataset.map(  # the answer the model does not give: every item wrong for the clean model
            lambda r: {
                "answer_tokens": [model.tokenizer.convert_tokens_to_ids(str((digit[r["answer_token"]] + 1) % 10))]
            }
        )
    )
    n = len(ds)
    mixed = PairSet.concat([ds.select(range(n // 2 + 1)), wrong.select(range(n // 2 + 1, n))])
    sets = {"copy": ds, "mixed": mixed, "wrong": wrong}
    tr = transfer(
        model, sets, PLANTED, means, n_random=3, seed=0, held_in=["copy"], min_clean_accuracy=0.5, ablation="mean"
    )
    rows = {r.dataset: r for r in tr.rows}
    assert rows["copy"].held_in and not rows["mixed"].held_in
    assert rows["wrong"].status == "not measurable on this model" and rows["wrong"].clean.value == 0.0
    m = rows["mixed"]
    assert m.status == "measured" and m.n_correct == n // 2 + 1 and m.n == n
    # key-ablated accuracy is over the clean-correct items only, where clean accuracy is 1 by construction
    assert m.key.value == pytest.approx(ablated_accuracy(model, ds.select(range(n // 2 + 1)), PLANTED, means))
    assert m.key_drop == pytest.approx(m.key.value - 1.0)
    for r in (rows["copy"], m):
        assert r.key.low <= r.key.value <= r.key.high
        assert r.random.low <= r.random.value <= r.random.high
        assert r.key.high < r.random.low, "ablating the planted heads loses far more than random heads"


def test_transfer_uses_the_knockout_ablation_and_mean_where_no_counterfactual(planted):
    model, ds, _ = planted
    means = head_means(model, ds)
    no_cf = PairSet(ds.dataset.remove_columns(["cf_tokens"]))
    tr = transfer(model, {"cf": ds, "no cf": no_cf}, PLANTED, means, n_random=2, ablation="position_mean")
    rows = {r.dataset: r for r in tr.rows}
    assert rows["cf"].ablation == "position_mean" and rows["no cf"].ablation == "mean"
    # each row equals the plain (unsaved, every block) knockout of its own ablation on the clean-correct items
    for name, data, ablation in (("cf", ds, "position_mean"), ("no cf", no_cf, "mean")):
        scorer = KnockoutScorer(model, data, ablation, means)
        clean = scorer.score([], fast=False)[0]
        kept = [i for i, c in enumerate(clean) if c]
        key = scorer.score(PLANTED, fast=False)[0]
        assert rows[name].n_correct == len(kept)
        assert rows[name].key.value == pytest.approx(sum(key[i] for i in kept) / len(kept))
    with unchecked(), pytest.raises(ValueError, match="ablation"):
        transfer(model, {"cf": ds}, PLANTED, means, ablation="zero")


def test_old_transfer_files_ask_for_a_rerun(tmp_path):
    import json

    from mathcircuits import ResultFileError

    old = {"__kind__": "mathcircuits.TransferResult", "__version__": 2, "rows": [], "key_heads": [], "n_random": 1}
    (tmp_path / "t.json").write_text(json.dumps(old))
    with pytest.raises(ResultFileError, match="re-run `mathcircuits validate"):
        TransferResult.load(tmp_path / "t.json")


def test_transfer_rows_in_the_flat_format_load_to_intervals_and_save_the_same_file(tmp_path):
    import json

    nan = float("nan")
    measured = {
        "dataset": "two-digit",
        "held_in": False,
        "n": 40,
        "n_correct": 30,
        "clean_accuracy": 0.75,
        "clean_low": 0.6,
        "clean_high": 0.86,
        "status": "measured",
        "key_ablated_accuracy": 0.2,
        "key_low": 0.1,
        "key_high": 0.37,
        "random_ablated_accuracy": 0.9,
        "random_low": 0.8,
        "random_high": 0.97,
        "random_ablated_std": 0.05,
        "key_drop": -0.8,
        "random_drop": -0.1,
        "ablation": "mean",
        "p_value": 0.25,
        "n_draws": 3,
    }
    skipped = {
        **measured,
        "dataset": "words",
        "n_correct": 2,
        "clean_accuracy": 0.05,
        "clean_low": 0.01,
        "clean_high": 0.17,
        "status": "not measurable on this model",
        "key_ablated_accuracy": nan,
        "key_low": nan,
        "key_high": nan,
        "random_ablated_accuracy": nan,
        "random_low": nan,
        "random_high": nan,
        "random_ablated_std": nan,
        "key_drop": nan,
        "random_drop": nan,
        "p_value": nan,
        "n_draws": 0,
    }
    saved = {"__kind__": "mathcircuits.TransferResult", "__version__": 4, "rows": [measured, skipped],
             "key_heads": [[1, 1]], "n_random": 3, "scope": "all", "notes": {}, "min_clean_accuracy": 0.5,
             "min_correct": 5, "confidence": 0.9, "seed": 0}  # fmt: skip
    (tmp_path / "t.json").write_text(json.dumps(saved, indent=2) + "\n")  # as main's code writes it
    res = TransferResult.load(tmp_path / "t.json")
    row = res.rows[0]
    assert row.clean == Interval(0.75, 0.6, 0.86, 40, 0.9, "wilson")  # the level is the result's
    assert row.key == Interval(0.2, 0.1, 0.37, 30, 0.9, "wilson") and row.random.high == 0.97
    assert math.isnan(res.rows[1].key.value) and res.rows[1].key.n == 2
    again = res.save(tmp_path / "again.json")
    assert again.read_text() == (tmp_path / "t.json").read_text()  # the same keys, order and values
    assert res.to_dict()["rows"][0] == measured == res.rows[0].to_dict()
    assert list(res.to_dataframe().columns) == list(measured)


def test_means_round_trip(tmp_path, tiny_llama, pairs):
    m = head_means(tiny_llama, pairs)
    assert torch.equal(HeadMeans.load(m.save(tmp_path / "m.pt")).means, m.means)
    assert TransferResult(rows=(), key_heads=[], n_random=0).to_dataframe().empty
