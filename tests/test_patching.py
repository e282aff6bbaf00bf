import dataclasses
import json

import pytest
import torch

from mathcircuits.data import GenerationConfig, PairSet, generate_pairs
from mathcircuits.models import Head, load_model
from mathcircuits.patching import (
    KeyComponents,
    PatchingResult,
    SelectionConfig,
    SelectionError,
    compare_rankings,
    path_patch,
    select_key_components,
)
from mathcircuits.patching.metrics import METRICS

from helpers import unchecked


@pytest.fixture(scope="module")
def pairs_llama(tiny_llama, template_sets):
    return generate_pairs(
        tiny_llama.tokenizer,
        template_sets,
        GenerationConfig(
            operations=("add", "mul"), template_ids=("add_eq_1", "add_st_1", "mul_eq_1"), n_per_template=3
        ),
    )


def unguarded(name: str):
    """The metric without relative_logit's guard: random tiny models have clean logits near 0, which the guard
    (rightly) refuses, but the scans' equality holds for every row."""
    return dataclasses.replace(METRICS[name], min_clean=None)


@pytest.mark.parametrize("metric", ["answer_logprob", "relative_logit", "logit_diff", "prob_change"])
@pytest.mark.parametrize("model_name", ["tiny_llama", "tiny_gpt2"])
def test_exact_equals_reference(request, template_sets, model_name, metric):
    model = request.getfixturevalue(model_name)
    metric = unguarded(metric)
    ds = generate_pairs(
        model.tokenizer,
        template_sets,
        GenerationConfig(operations=("add",), template_ids=("add_eq_1", "add_qa_1"), n_per_template=2),
    )
    fast = path_patch(model, ds, metric=metric, keep_per_pair=True)
    ref = path_patch(model, ds, metric=metric, method="reference", keep_per_pair=True)
    assert torch.isfinite(fast.head_effects).all() and torch.isfinite(fast.mlp_effects).all()
    assert (fast.per_pair_heads - ref.per_pair_heads).abs().max() <= 1e-4
    assert (fast.per_pair_mlps - ref.per_pair_mlps).abs().max() <= 1e-4
    assert fast.head_effects.abs().max() > 1e-6  # the scan measured something


def test_path_patch_draws_a_bar_on_stderr_unless_told_not_to(tiny_llama, pairs_llama, capsys, monkeypatch):
    def stderr_of(**kw) -> str:
        path_patch(tiny_llama, pairs_llama.select(range(2)), **kw)
        return capsys.readouterr().err

    spec = tiny_llama.spec
    shown = stderr_of(progress=True)
    phase = f"patching {spec.n_layers * spec.n_heads} heads and {spec.n_layers} MLPs"
    assert phase in shown and "100%|" in shown  # the phase, then the bar itself
    assert stderr_of(progress=False) == ""
    assert stderr_of() == ""  # the default follows MATHCIRCUITS_PROGRESS, which conftest sets to 0
    monkeypatch.setenv("MATHCIRCUITS_PROGRESS", "1")
    assert "patching" in stderr_of()  # a new user's default: on


def test_patching_changes_something_only_when_prompts_differ(tiny_llama, pairs_llama):
    same = PairSet(pairs_llama.dataset.map(lambda r: {"cf_tokens": r["tokens"]}))
    res = path_patch(tiny_llama, same)
    assert res.head_effects.abs().max() < 1e-6 and res.mlp_effects.abs().max() < 1e-6


def test_sender_choice(tiny_llama, pairs_llama):
    only_heads = path_patch(tiny_llama, pairs_llama, senders=("heads",))
    assert torch.isnan(only_heads.mlp_effects).all() and torch.isfinite(only_heads.head_effects).all()
    both = path_patch(tiny_llama, pairs_llama)
    assert torch.allclose(only_heads.head_effects, both.head_effects, atol=1e-6)


def test_exact_scan_of_some_senders_equals_the_full_scan_there(tiny_llama, pairs_llama):
    from mathcircuits.data.pairset import pair_batches
    from mathcircuits.patching.driver import METHODS
    from mathcircuits.patching.metrics import METRICS
    from mathcircuits.patching.scan import Senders

    exact_scan = METHODS["exact"]
    batch = pair_batches(pairs_llama, 8, tiny_llama.device, answers=True)[0]
    metric = METRICS["answer_logprob"]
    full = exact_scan(tiny_llama, batch, Senders(), metric)
    only = frozenset({("head", 0, 1), ("head", 2, 3), ("mlp", 1, -1)})
    some = exact_scan(tiny_llama, batch, Senders(only=only), metric)
    for kind, layer, head in only:
        a, b = (some.heads[:, layer, head], full.heads[:, layer, head]) if kind == "head" else (
            some.mlps[:, layer], full.mlps[:, layer])  # fmt: skip
        assert torch.allclose(a, b, atol=1e-6)
    assert int(torch.isfinite(some.heads).sum()) == 2 * batch.tokens.shape[0]  # nothing else was computed
    assert int(torch.isfinite(some.mlps).sum()) == batch.tokens.shape[0]


def test_attribution_ranks_like_exact(tiny_llama, pairs_llama):
    exact = path_patch(tiny_llama, pairs_llama, metric="logit_diff")
    approx = path_patch(tiny_llama, pairs_llama, metric="logit_diff", method="attribution")
    assert compare_rankings(approx, exact, k=3)["spearman_heads"] > 0.5


@pytest.fixture(scope="module")
def small_heads_llama():
    """tiny-llama with W_O scaled by 1e-3: each head's patch is a small change, so first order is nearly exact."""
    model = load_model("tiny-llama")
    with torch.no_grad():
        for name, p in model.hf_model.named_parameters():
            if "o_proj" in name and name.endswith(
                "weight"
            ):  # the bridge wraps modules: o_proj._original_component.weight
                p.mul_(1e-3)
    assert model.bridge.W_O.abs().max() < 1e-2  # the bridge shares the scaled weights
    return model


@pytest.mark.parametrize("metric", ["relative_logit", "logit_diff", "prob_change"])
def test_attribution_equals_exact_to_first_order(small_heads_llama, pairs_llama, metric):
    """Attribution is the first-order term of the same path: on small head patches it matches exact per pair."""
    ds = pairs_llama.select(range(4))
    metric = unguarded(metric)
    exact = path_patch(small_heads_llama, ds, metric=metric, senders=("heads",), keep_per_pair=True)
    approx = path_patch(
        small_heads_llama, ds, metric=metric, senders=("heads",), method="attribution", keep_per_pair=True
    )
    scale = exact.per_pair_heads.abs().max()
    assert scale > 0
    assert (approx.per_pair_heads - exact.per_pair_heads).abs().max() <= 0.01 * scale
    # the same three most negative heads, unless the third and fourth are closer than the two methods differ
    ranked = exact.head_effects.flatten().sort().values
    err = (approx.head_effects - exact.head_effects).abs().max()
    if ranked[3] - ranked[2] > 2 * err:
        assert compare_rankings(approx, exact, k=3)["top3_overlap"] == 1.0
    else:
        assert compare_rankings(approx, exact, k=2)["top2_overlap"] == 1.0


def test_result_save_load_dataframe(tmp_path, tiny_llama, pairs_llama):
    res = path_patch(tiny_llama, pairs_llama, keep_per_pair=True)
    path = res.save(tmp_path / "p.pt")
    back = PatchingResult.load(path)
    assert torch.equal(back.head_effects, res.head_effects) and torch.equal(back.per_pair_heads, res.per_pair_heads)
    df = back.to_dataframe()
    assert len(df) == 3 * 4 + 3 and set(df["kind"]) == {"head", "mlp"}
    top = back.top_heads(3)
    assert [e for *_, e in top] == sorted(e for *_, e in top)
    assert top[0][2] == pytest.approx(float(res.head_effects.min()))


def test_unequal_pairs_are_refused(tiny_llama, pairs_llama):
    bad = PairSet(pairs_llama.dataset.map(lambda r: {"cf_tokens": r["cf_tokens"] + [5]}))
    with pytest.raises(ValueError, match="token-aligned"):
        path_patch(tiny_llama, bad)


def test_bad_arguments(tiny_llama, pairs_llama):
    with unchecked(), pytest.raises(ValueError, match="metric"):
        path_patch(tiny_llama, pairs_llama, metric="accuracy")
    with unchecked(), pytest.raises(ValueError, match="senders"):
        path_patch(tiny_llama, pairs_llama, senders=("neurons",))
    with pytest.raises(TypeError, match="metric"):  # a type checker refuses it first
        path_patch(tiny_llama, pairs_llama, metric="accuracy")


def test_selection_rules_and_json_round_trip(tmp_path, tiny_llama, pairs_llama):
    res = path_patch(tiny_llama, pairs_llama)
    top = select_key_components(res, rule="topk", k=3)
    assert len(top.heads) == 3 and list(top.heads) == [(l, h) for l, h, _ in res.top_heads(3)]
    flat = res.head_effects.flatten()
    cut = float(flat.median())  # a threshold from the data, so that some heads fall below it
    thr = select_key_components(
        res, dataclasses.replace(SelectionConfig(), threshold_of="effect"), rule="threshold", threshold=cut
    )
    below = {(i // 4, i % 4) for i in range(len(flat)) if flat[i] < cut}
    assert below and set(thr.heads) == below
    z = select_key_components(res, rule="zscore", z=0.5)
    tail = {(i // 4, i % 4) for i in range(len(flat)) if flat[i] < float(flat.mean() - 0.5 * flat.std())}
    assert tail and set(z.heads) == tail
    path = top.save(tmp_path / "key.json")
    assert json.loads(path.read_text())["heads"] == [list(h) for h in top.heads]
    back = KeyComponents.load(path)
    assert back == top
    back.check_model(tiny_llama.spec)


def test_selection_from_another_model_is_refused(tiny_llama, tiny_gpt2, pairs_llama):
    key = select_key_components(path_patch(tiny_llama, pairs_llama), rule="topk", k=2)
    with pytest.raises(SelectionError, match="does not fit"):
        key.check_model(tiny_gpt2.spec)


def test_head_index_out_of_range_is_refused(tiny_llama):
    with pytest.raises(SelectionError, match="out of range"):
        KeyComponents(model=tiny_llama.spec, heads=(Head(0, 9),))


@pytest.mark.slow
def test_exact_equals_reference_on_embedded(embedded, embedded_add_pairs):
    sub = embedded_add_pairs.select(range(2))
    fast = path_patch(embedded, sub, keep_per_pair=True)
    ref = path_patch(embedded, sub, method="reference", keep_per_pair=True)
    assert (fast.per_pair_heads - ref.per_pair_heads).abs().max() <= 1e-4
    assert (fast.per_pair_mlps - ref.per_pair_mlps).abs().max() <= 1e-4


def test_answer_logprob_scores_every_answer_token_and_ignores_offsets():
    from mathcircuits.patching.metrics import METRICS, answer_readout

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 2, 11, generator=gen)
    answers = torch.tensor([[1, 2], [3, 4], [5, 6]])
    r = answer_readout(logits, answers)
    manual = sum(torch.log_softmax(logits[:, j], -1)[torch.arange(3), answers[:, j]] for j in range(2))
    assert torch.allclose(r.logprob, manual) and torch.allclose(r.logit, logits[:, 0][torch.arange(3), answers[:, 0]])
    shifted = answer_readout(logits + 16.0, answers)  # an offset every raw logit carries
    m = METRICS["answer_logprob"]
    assert torch.allclose(m(shifted, r), torch.zeros(3), atol=1e-5)
    assert not torch.allclose(METRICS["relative_logit"](shifted, r), torch.zeros(3)), "the paper's ratio moves"
    short = answer_readout(logits, answers, valid=torch.tensor([1, 2, 2]))
    assert torch.allclose(short.logprob[0], torch.log_softmax(logits[0, 0], -1)[1])


def test_attribution_refuses_a_metric_over_every_answer_token(tiny_llama, pairs_llama):
    """The exact and reference scans read every answer token (the default); the first-order screen cannot."""
    with pytest.raises(ValueError, match="not a first-token metric.*Fix"):
        path_patch(tiny_llama, pairs_llama, metric="answer_logprob", method="attribution")


@pytest.mark.parametrize("method", ["exact", "reference"])
def test_the_scans_refuse_a_batch_without_every_answer_token(tiny_llama, pairs_llama, method):
    """A metric over every answer token needs a batch that holds them; a first-token batch is refused, not read."""
    from mathcircuits.data.pairset import pair_batches
    from mathcircuits.patching.driver import METHODS
    from mathcircuits.patching.metrics import METRICS
    from mathcircuits.patching.scan import Senders

    first_only = pair_batches(pairs_llama, 8, tiny_llama.device)[0]
    assert first_only.answers is None
    with pytest.raises(ValueError, match="reads every answer token.*Fix: build the batches"):
        METHODS[method](tiny_llama, first_only, Senders(), METRICS["answer_logprob"], chunk_rows=8192, progress=False)
    whole = pair_batches(pairs_llama, 8, tiny_llama.device, answers=True)[0]
    eff = METHODS[method](tiny_llama, whole, Senders(), METRICS["logit_diff"], chunk_rows=8192, progress=False)
    assert torch.isfinite(eff.heads).all()  # a first-token metric reads no answer tokens: the same batch runs
