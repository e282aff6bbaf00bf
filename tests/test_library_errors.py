"""The library: inputs that were accepted silently, or blamed the wrong input, now get a clear error."""

from __future__ import annotations

import pytest
import torch

from mathcircuits.ablation import HeadMeans, ablated_accuracy, head_means, knockout_curve, transfer
from mathcircuits.data import GenerationConfig, PairSet, generate_pairs, score_pairs
from mathcircuits.finetune import SliceError, head_slices
from mathcircuits.models import Head, ModelMismatchError, load_hf_model
from mathcircuits.patching import KeyComponents, PatchingResult, SelectionError, path_patch, select_key_components


@pytest.fixture(scope="module")
def pairs(tiny_llama, template_sets):
    cfg = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=4)
    return generate_pairs(tiny_llama.tokenizer, template_sets, cfg)


@pytest.fixture(scope="module")
def gpt2_key(tiny_gpt2):
    """Key heads of tiny-gpt2 whose indices also exist in tiny-llama (the silent case)."""
    return KeyComponents(model=tiny_gpt2.spec, heads=(Head(0, 1), Head(1, 2)))


def _effects(spec, heads: torch.Tensor, mlps: torch.Tensor | None = None) -> PatchingResult:
    mlps = torch.linspace(-0.2, 0.1, spec.n_layers) if mlps is None else mlps
    return PatchingResult(
        head_effects=heads, mlp_effects=mlps, metric="relative_logit", method="exact", model=spec, n_pairs=1
    )


def test_key_heads_of_another_model_are_refused_by_every_entry_point(tiny_llama, pairs, gpt2_key):
    means = head_means(tiny_llama, pairs)
    for call in (
        lambda: ablated_accuracy(tiny_llama, pairs, gpt2_key, means),
        lambda: transfer(tiny_llama, {"add": pairs}, gpt2_key, means, n_random=1, ablation="mean"),
    ):
        with pytest.raises(SelectionError) as info:
            call()
        msg = str(info.value)
        assert "'tiny-gpt2'" in msg and "'tiny-llama'" in msg and info.value.fix


def test_head_means_of_another_model_are_refused(tiny_llama, tiny_gpt2, pairs, template_sets):
    gpt2_pairs = generate_pairs(
        tiny_gpt2.tokenizer,
        template_sets,
        GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=2),
    )
    gpt2_means = head_means(tiny_gpt2, gpt2_pairs)
    assert gpt2_means.model == tiny_gpt2.spec
    with pytest.raises(ModelMismatchError, match=r"'tiny-gpt2'.*'tiny-llama'"):
        ablated_accuracy(tiny_llama, pairs, [(0, 1)], gpt2_means)
    hand_made = HeadMeans(means=torch.zeros(2, 4, 16), n_prompts=1)  # no identity recorded: the shape is checked
    with pytest.raises(ValueError, match=r"shape \(2, 4, 16\).*needs \(3, 4, 16\)"):
        ablated_accuracy(tiny_llama, pairs, [(0, 1)], hand_made)


def test_a_patching_result_of_another_model_is_refused_by_knockout(tiny_llama, tiny_gpt2, pairs):
    other = _effects(tiny_gpt2.spec, torch.zeros(2, 4) - 0.1)
    with pytest.raises(ModelMismatchError, match=r"patching result was made on 'tiny-gpt2'.*'tiny-llama'"):
        knockout_curve(tiny_llama, pairs, other, max_k=1, n_random=1)


@pytest.mark.parametrize("bad", [float("nan"), float("-inf"), float("inf")])
def test_non_finite_effects_are_refused_not_dropped(tiny_llama, bad):
    heads = torch.full((3, 4), -0.01)
    heads[1, 2] = bad  # the strongest head, had it been finite
    res = _effects(tiny_llama.spec, heads)
    for rule in ("topk", "threshold", "zscore"):
        with pytest.raises(SelectionError, match=r"non-finite head effects \(L1\.H2="):
            select_key_components(res, rule=rule, k=2)


def test_all_nan_heads_are_refused_but_unpatched_mlps_give_no_mlps(tiny_llama):
    spec = tiny_llama.spec
    with pytest.raises(SelectionError, match="no head effects"):
        select_key_components(_effects(spec, torch.full((3, 4), float("nan"))), rule="topk", k=1)
    heads = torch.arange(12.0).reshape(3, 4) - 12
    key = select_key_components(_effects(spec, heads, torch.full((3,), float("nan"))), rule="topk", k=2)
    assert key.heads == ((0, 0), (0, 1)) and key.mlps == ()
    mlps = torch.tensor([0.1, float("nan"), -0.3])
    with pytest.raises(SelectionError, match=r"non-finite MLP effects \(MLP1=nan\)"):
        select_key_components(_effects(spec, heads, mlps), rule="topk", k=2)


def test_empty_dataset_errors_name_the_dataset_not_score_pairs(tiny_llama, pairs):
    empty = pairs.select([])
    with pytest.raises(ValueError, match=r"head_means got an empty dataset.*Fix:"):
        head_means(tiny_llama, empty)
    res = path_patch(tiny_llama, pairs)
    with pytest.raises(ValueError, match=r"knockout_curve got an empty dataset.*Fix:"):
        knockout_curve(tiny_llama, empty, res, max_k=1, n_random=1)
    with pytest.raises(ValueError, match="NaN or infinity"):
        HeadMeans(means=torch.full((3, 4, 16), float("nan")), n_prompts=0)


def test_score_pairs_names_missing_columns(tiny_llama, pairs):
    with pytest.raises(ValueError, match=r"without the columns \['answer_tokens'\].*Fix: pass pairs built by"):
        score_pairs(tiny_llama, PairSet(pairs.dataset.remove_columns("answer_tokens")))
    with pytest.raises(TypeError, match="PairSet"):  # the annotation (or, unchecked, score_pairs) refuses rows
        score_pairs(tiny_llama, [{"tokens": [1]}])


def test_head_slices_names_both_models():
    llama, _ = load_hf_model("tiny-llama")
    gpt2, _ = load_hf_model("tiny-gpt2")
    from mathcircuits.models import ModelSpec

    key = KeyComponents(model=ModelSpec.from_hf(gpt2, "tiny-gpt2"), heads=(Head(0, 1),))
    with pytest.raises(SelectionError) as info:
        head_slices(llama, key)
    msg = str(info.value)
    assert "'tiny-gpt2' (GPT2LMHeadModel" in msg and "(LlamaForCausalLM" in msg
    assert "'tiny-gpt2' and does not fit the model 'tiny-gpt2'" not in msg
    assert "this model, 'tiny-gpt2'" not in msg  # the HF model must not be given the selection's name
    with pytest.raises(SliceError, match=r"slices were made on .*LlamaForCausalLM.*do not fit this model.*GPT2LMHead"):
        head_slices(llama, [(0, 1)]).check_model(gpt2)


def test_patching_result_must_fit_its_model_shape(tiny_llama):
    with pytest.raises(ValueError, match=r"needs \(3, 4\)"):
        _effects(tiny_llama.spec, torch.zeros(2, 4), torch.zeros(2))
