"""The fine-tuning comparison protocol (mathcircuits.finetune.compare) on a tiny random Llama, offline."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from mathcircuits.data import GenerationConfig, generate_pairs, load_templates
from mathcircuits.finetune import (
    SFTComparison,
    SFTConfig,
    build_sft_dataset,
    check_modes,
    compare_sft,
    head_slices,
    load_tuned,
    lora_rank_for_budget,
    model_facts,
    random_heads,
    split_validation,
)
from mathcircuits.models import load_hf_model
from mathcircuits.patching import KeyComponents


def _fresh():
    return load_hf_model("tiny-llama")[0]


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    model, tok = load_hf_model("tiny-llama")
    tpl = load_templates()

    def pairs(seed: int, n: int):
        cfg = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=n, seed=seed)
        return generate_pairs(tok, tpl, cfg)

    train = pairs(1, 32)
    seen = set(train["prompt"])
    test = pairs(2, 40).filter(lambda r: r["prompt"] not in seen)
    pool = pairs(3, 40).filter(lambda r: r["prompt"] not in seen)
    val = split_validation(pool, test, 20, seed=0)
    key = KeyComponents(model=model_facts(model), heads=((0, 1), (1, 2)), mlps=(1,))
    return model, tok, train, test, val, key


def _margin_score(val):
    """0/1 per validation pair: is the answer token's logit above the median logit (varies with training)?"""

    def score(model):
        out = []
        with torch.no_grad():
            for tokens, n, answer in zip(val["tokens"], val["n_tokens"], val["answer_tokens"]):
                logits = model(torch.tensor([tokens[:n]])).logits[0, -1]
                out.append(int(logits[answer[0]] > logits.median()))
        return out

    return score


def test_validation_split_is_disjoint_from_test_and_train(setup):
    _, _, train, test, val, _ = setup
    assert len(val) > 0 and len(test) > 0
    assert not set(val["prompt"]) & set(test["prompt"])
    assert not set(val["prompt"]) & set(train["prompt"])


def test_random_heads_have_the_key_count_and_avoid_key_heads():
    key = ((0, 1), (1, 2), (1, 3))
    heads = random_heads(2, 4, len(key), key, seed=5)
    assert len(heads) == 3 and len(set(heads)) == 3 and not set(heads) & set(key)
    assert heads == random_heads(2, 4, 3, key, seed=5) and heads != random_heads(2, 4, 3, key, seed=6)
    with pytest.raises(ValueError, match="tune fewer"):
        random_heads(2, 4, 6, key)
    with pytest.raises(ValueError, match="at most once"):
        check_modes(["precise", "precise"])
    with pytest.raises(ValueError, match="at most once"):
        check_modes(["sparse"])


def test_lora_rank_matches_the_budget_within_half_a_rank(setup):
    model, *_ = setup
    for budget in (1000, 8192, 30000):
        rank, per_rank = lora_rank_for_budget(model, budget)
        assert abs(rank * per_rank - budget) <= per_rank / 2


@pytest.mark.slow  # the whole protocol: a learning-rate sweep of every mode, then the test runs (about 7 s of CPU)
def test_compare_sft_protocol(setup, tmp_path):
    model, tok, train, _, val, key = setup
    cfg = SFTConfig(max_steps=2, batch_size=4, micro_batch_size=4, progress_bar=False, warmup_ratio=0.0)
    modes = ("base", "precise", "precise@1", "random", "lora", "full")
    score = _margin_score(val)
    cmp = compare_sft(
        _fresh,
        tok,
        build_sft_dataset(tok, train),
        val,
        key,
        tmp_path,
        modes=modes,
        learning_rates=(1e-3, 3e-2),
        config=cfg,
        head_ranking=[(1, 2), (0, 1), (0, 0)],
        score=score,
    )
    df = cmp.to_dataframe()
    assert len(df) == 1 + 5 * 2  # base once, every trained mode at every rate
    assert (df.loc[df["mode"] != "base", "global_step"] == 2).all()  # same number of optimizer steps
    for mode in modes[1:]:
        rows = df[df["mode"] == mode]
        best = rows["val_accuracy"].max()
        assert cmp.selected[mode] == rows.loc[rows["val_accuracy"] == best, "learning_rate"].min()
    assert len({tuple(df.loc[df["mode"] == m, "val_accuracy"]) for m in modes}) > 1  # the score does vary
    budget = head_slices(model, KeyComponents(model=key.model, heads=key.heads)).n_tuned
    assert cmp.run("precise").n_trainable == budget
    _, per_rank = lora_rank_for_budget(model, budget)
    assert abs(cmp.run("lora").n_trainable - budget) <= per_rank / 2  # LoRA on the same budget
    random_set = cmp.settings.components["random"]
    assert len(random_set) == len(key.heads) and not {tuple(h) for h in random_set} & set(key.heads)
    assert cmp.settings.components["precise@1"] == [[1, 2]]
    back = SFTComparison.load(tmp_path / "comparison.json")
    assert back.selected == cmp.selected
    pd.testing.assert_frame_equal(back.to_dataframe(), df)  # runs round-trip (NaN rates of base included)
    for mode in ("precise", "lora", "full"):  # the selected model rebuilt from its folder scores the same
        assert score(load_tuned(_fresh, cmp.run(mode))) == list(cmp.run(mode).val_correct)
    again = compare_sft(
        _fresh, tok, build_sft_dataset(tok, train), val, key, tmp_path, modes=modes, learning_rates=(1e-3, 3e-2),
        config=cfg, head_ranking=[(1, 2), (0, 1), (0, 0)], score=lambda m: pytest.fail("retrained a finished run"),
    )  # fmt: skip
    assert again.selected == cmp.selected
