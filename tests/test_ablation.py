import pytest
import torch

from mathcircuits.ablation import HeadMeans, KnockoutResult, TransferResult, ablated_accuracy, ablated_model, head_means, knockout_curve, transfer
from mathcircuits.data import GenerationConfig, generate_pairs
from mathcircuits.patching import path_patch


@pytest.fixture(scope="module")
def pairs(tiny_llama, template_sets):
    return generate_pairs(tiny_llama.tokenizer, template_sets, GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=6))


def test_head_means_are_means_of_counterfactual_z(tiny_llama, pairs):
    means = head_means(tiny_llama, pairs)
    assert means.means.shape == (3, 4, 16)
    toks = torch.tensor(pairs["cf_tokens"])
    _, cache = tiny_llama.bridge.run_with_cache(toks)
    expected = cache["blocks.1.attn.hook_z"].mean(dim=(0, 1))
    assert torch.allclose(means.means[1], expected, atol=1e-5)


def test_ablation_replaces_only_chosen_heads(tiny_llama, pairs):
    from mathcircuits.ablation.knockout import _hooks

    means = head_means(tiny_llama, pairs)
    toks = torch.tensor(pairs["tokens"][:2])
    _, clean = tiny_llama.bridge.run_with_cache(toks)
    seen = {}

    def grab(act, hook):
        seen["z"] = act.clone()

    tiny_llama.bridge.run_with_hooks(toks, fwd_hooks=_hooks(tiny_llama, [(1, 2)], means, "all") + [("blocks.1.attn.hook_z", grab)])
    z, z0 = seen["z"], clean["blocks.1.attn.hook_z"]
    assert torch.allclose(z[:, :, 2], means.means[1, 2].expand_as(z[:, :, 2]))
    assert torch.allclose(z[:, :, [0, 1, 3]], z0[:, :, [0, 1, 3]])
    out = tiny_llama.bridge(toks)
    assert not torch.allclose(ablated_model(tiny_llama, [(1, 2)], means)(toks), out)
    assert torch.allclose(ablated_model(tiny_llama, [], means)(toks), out)


def test_knockout_curve_shapes_and_baseline(tiny_llama, pairs, tmp_path):
    res = path_patch(tiny_llama, pairs)
    ko = knockout_curve(tiny_llama, pairs, res, max_k=3, n_random=2)
    assert ko.ks == [0, 1, 2, 3]
    assert ko.random_accuracy.shape == (2, 4)
    assert ko.ranked_accuracy[0] == ko.baseline_accuracy == pytest.approx(float(ko.random_accuracy[0, 0]))
    assert all(0 <= a <= 1 for a in ko.ranked_accuracy)
    back = KnockoutResult.load(ko.save(tmp_path / "ko.pt"))
    assert back.ranked_accuracy == ko.ranked_accuracy and torch.equal(back.random_accuracy, ko.random_accuracy)
    assert list(back.to_dataframe().columns)[:3] == ["k", "ranked_accuracy", "random_mean"]


def test_transfer_rows(tiny_llama, pairs, template_sets):
    means = head_means(tiny_llama, pairs)
    other = generate_pairs(tiny_llama.tokenizer, template_sets, GenerationConfig(operations=("mul",), template_ids=("mul_eq_1",), n_per_template=4))
    tr = transfer(tiny_llama, {"add": pairs, "mul": other}, [(0, 1), (2, 3)], means, n_random=2)
    df = tr.to_dataframe()
    assert list(df["dataset"]) == ["add", "mul"]
    for row in tr.rows:
        assert row["key_drop"] == pytest.approx(row["key_ablated_accuracy"] - row["clean_accuracy"])
    with pytest.raises(IndexError):
        ablated_accuracy(tiny_llama, pairs, [(7, 0)], means)


def test_means_round_trip(tmp_path, tiny_llama, pairs):
    m = head_means(tiny_llama, pairs)
    assert torch.equal(HeadMeans.load(m.save(tmp_path / "m.pt")).means, m.means)
    assert TransferResult(rows=[], key_heads=[], n_random=0).to_dataframe().empty
