"""Many knockout sets in one forward equal one forward per set (claims C2, C4, C5), on two tiny families.

tiny-llama (grouped-query attention, rotary) and tiny-gpt2 (one key/value per head, learned positions). The
pairs' answers are the clean model's own greedy next tokens, so every pair starts correct and a knockout can
make it wrong: equal correctness is then a claim that could fail. Logits and margins are compared with the
project's float tolerance for the model's dtype and depth (:func:`~mathcircuits.models.compare`): a batch of
sets × pairs rows may round the matmuls differently from a batch of pairs, so bit equality is not promised.
"""

import pytest
import torch

import mathcircuits.ablation.scorer as scorer_module
from mathcircuits.ablation import KnockoutScorer, head_means, mlp_margin, random_control, transfer
from mathcircuits.ablation.result import MEASURED
from mathcircuits.ablation.scorer import check_batched_knockout
from mathcircuits.data import GenerationConfig, PairSet, generate_pairs
from mathcircuits.models import compare, model_depth

FAMILIES = ["tiny_llama", "tiny_gpt2"]
KEY = {"tiny_llama": [(1, 2), (2, 1)], "tiny_gpt2": [(0, 1), (1, 2)]}  # 9 depth-matched sets each


def _greedy_pairs(model, template_sets) -> PairSet:
    """add_eq_1 pairs whose one-token answer is the clean model's greedy next token."""
    config = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=6)
    ds = generate_pairs(model.tokenizer, template_sets, config)
    with torch.no_grad():
        greedy = [int(model.bridge(torch.tensor([t]))[0, -1].argmax()) for t in ds.tokens]
    data = ds.dataset.remove_columns(["answer_tokens", "answer_token"])
    data = data.add_column("answer_tokens", [[a] for a in greedy]).add_column("answer_token", greedy)
    return PairSet(data)


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, template_sets):
    model = request.getfixturevalue(request.param)
    pairs = _greedy_pairs(model, template_sets)
    return request.param, model, pairs, head_means(model, pairs)


def _close(model, a: torch.Tensor, b: torch.Tensor) -> None:
    diff, tol = compare(a, b, model.dtype, model_depth(model))
    assert diff <= tol, f"batched differs from one set per forward by {diff:.2e} (tolerance {tol:.2e})"


def _sets(model) -> list[list[tuple[int, int]]]:
    last, heads = model.spec.n_layers - 1, model.spec.n_heads
    # lowest layers 0, 1 and the last, an empty set among them; 7 sets in chunks of 3 (3 + 3 + 1)
    return [[(1, 0), (last, 1)], [(1, 2)], [(0, 1), (last, 0)], [], [(last, heads - 1)], [(1, 1), (1, 3)], [(0, 0)]]


@pytest.mark.parametrize(
    ("ablation", "scope"), [("mean", "all"), ("position_mean", "all"), ("resample", "all"), ("mean", "last")]
)
def test_scorer_batched_logits_equal_one_forward_per_set(family, ablation, scope):
    _, model, pairs, means = family
    scorer = KnockoutScorer(model, pairs, ablation, means, scope, batch_size=4)  # batches of 4 and 2 pairs
    sets = _sets(model)
    one = [torch.cat(scorer.logits(s)) for s in sets]
    many = [torch.cat(rows) for rows in scorer.logits_many(sets, batch_sets=3)]
    _close(model, torch.stack(many), torch.stack(one))
    assert scorer.score_many(sets, batch_sets=3) == [scorer.score(s) for s in sets]


def test_batched_forward_holds_sets_times_pairs_rows(family, monkeypatch):
    _, model, pairs, means = family
    scorer = KnockoutScorer(model, pairs, "mean", means, batch_size=len(pairs))
    scorer.logits([])  # the clean run and the run-time checks, before counting
    scorer.logits_many(_sets(model)[:1], batch_sets=2)
    rows = []
    real = scorer_module.run_from_layer

    def counting(bridge, resid, layer, *args, **kwargs):
        rows.append((layer, resid.shape[0]))
        return real(bridge, resid, layer, *args, **kwargs)

    monkeypatch.setattr(scorer_module, "run_from_layer", counting)
    sets = _sets(model)
    scorer.logits_many(sets, batch_sets=3)
    n, last = len(pairs), model.spec.n_layers - 1
    # by lowest layer: 1 → sets 0, 1, 5 (one chunk); 0 → sets 2, 6; last → set 4; the empty set is the clean run
    assert sorted(rows) == sorted([(1, 3 * n), (0, 2 * n), (last, n)])


def test_random_control_batched_equals_one_set_per_forward(family):
    name, model, pairs, means = family
    kw = dict(n_draws=9, ablation="mean", means=means)
    one = random_control(model, pairs, KEY[name], batch_sets=1, **kw)
    many = random_control(model, pairs, KEY[name], batch_sets=4, **kw)  # 9 draws: chunks of 4, 4, 1
    assert one.draws == many.draws and len(many.draws) == 9
    assert torch.equal(one.key_correct, many.key_correct)
    assert torch.equal(one.random_correct, many.random_correct)
    assert torch.equal(one.random_drops(), many.random_drops())
    assert (one.key_drop(), one.percentile(), one.p_value()) == (many.key_drop(), many.percentile(), many.p_value())
    assert 0 < float(one.random_correct.mean()) < 1  # some draws break some pairs: the equality could fail


def test_mlp_margin_batched_equals_one_set_per_forward(family):
    name, model, pairs, means = family
    draws = random_control(model, pairs, KEY[name], n_draws=9, ablation="mean", means=means).draws
    layers = range(1, model.spec.n_layers)
    kw = dict(ablation="position_mean", random_sets=draws)
    one = mlp_margin(model, pairs, KEY[name], layers, batch_sets=1, **kw)
    many = mlp_margin(model, pairs, KEY[name], layers, batch_sets=4, **kw)  # 11 variants: chunks of 4, 4, 3
    assert many.random_ablated is not None and one.random_ablated is not None
    both = [torch.cat([r.clean_margin, r.ablated_margin]) for r in (many, one)]
    _close(model, *both)
    _close(model, many.random_ablated, one.random_ablated)
    assert float((one.random_ablated - one.clean_margin).abs().max()) > 1e-3  # the knockouts move the margin


def test_transfer_batched_equals_one_set_per_forward(family, template_sets):
    name, model, pairs, means = family
    other = _greedy_pairs(model, template_sets).select(range(5))
    sets = {"add": pairs, "add (5)": other}
    kw = dict(n_random=5, ablation="resample", min_correct=3)
    one = transfer(model, sets, KEY[name], means, batch_sets=1, **kw)
    many = transfer(model, sets, KEY[name], means, batch_sets=4, **kw)  # key + 5 draws: chunks of 4 and 2
    assert [r.status for r in one.rows] == [MEASURED, MEASURED] and all(r.n_draws == 5 for r in one.rows)
    assert one.rows == many.rows
    assert min(r.random.value for r in one.rows) < 1  # some draws break some items: the equality could fail


def test_batched_knockout_run_time_check_passes(family):
    _, model, _, _ = family
    for ablation in ("mean", "position_mean", "resample"):
        diff, tol = check_batched_knockout(model, ablation, "all")
        assert diff <= tol


def test_batched_knockout_without_start_at_layer_takes_one_set_per_forward(tiny_llama, template_sets, monkeypatch):
    """TransformerLens 3.9's bridge cannot resume mid-network: the batched path falls back to the one-set path."""
    pairs = _greedy_pairs(tiny_llama, template_sets)
    sets = _sets(tiny_llama)
    reference = KnockoutScorer(tiny_llama, pairs, "resample", seed=3, batch_size=4).logits_many(sets, batch_sets=1)
    original, calls = tiny_llama.bridge.run_with_hooks, []

    def no_mid_start(*args, start_at_layer=None, **kwargs):
        calls.append(start_at_layer)
        if start_at_layer is not None:
            raise NotImplementedError("start_at_layer is not supported in TransformerBridge.")
        return original(*args, **kwargs)

    monkeypatch.setattr(tiny_llama.bridge, "run_with_hooks", no_mid_start)
    scorer = KnockoutScorer(tiny_llama, pairs, "resample", seed=3, batch_size=4)
    got = scorer.logits_many(sets, batch_sets=3)
    _close(tiny_llama, torch.stack([torch.cat(r) for r in got]), torch.stack([torch.cat(r) for r in reference]))
    calls.clear()
    scorer.logits_many(sets, batch_sets=3)
    assert calls and set(calls) == {None}  # every block from the prefix on, one set per forward
