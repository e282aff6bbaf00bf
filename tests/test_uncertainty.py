"""Result intervals: saved and loaded with the result, and covering a known effect at ~their nominal rate."""

import pytest
import torch

from mathcircuits.models import Head, ModelSpec
from mathcircuits.patching import KeyComponents, PatchingResult

from helpers import binomial_band

SPEC = ModelSpec(
    "toy", "toy", "ToyForCausalLM", n_layers=3, n_heads=2, n_kv_heads=2, d_head=4, d_model=8, d_mlp=16, vocab_size=11
)
TRUTH = torch.tensor([[-0.3, 0.0], [0.1, -0.05], [0.0, 0.2]])


def _result(per_pair: torch.Tensor, seed: int = 0) -> PatchingResult:
    return PatchingResult(
        head_effects=per_pair.mean(0),
        mlp_effects=torch.zeros(3),
        metric="logit_diff",
        method="exact",
        model=SPEC,
        n_pairs=per_pair.shape[0],
        per_pair_heads=per_pair,
        ci_n_boot=200,
        ci_seed=seed,
    )


def test_patching_intervals_cover_a_planted_effect_at_nominal_rate():
    # Synthetic per-pair effects with a known mean per head (the truth); 200 simulated runs.
    gen = torch.Generator().manual_seed(0)
    hits, n_sims = 0, 200
    for s in range(n_sims):
        r = _result(TRUTH + 0.2 * torch.randn(40, 3, 2, generator=gen), seed=s)
        hits += int(((r.head_low <= TRUTH) & (TRUTH <= r.head_high)).sum())
    lo, hi = binomial_band(0.95, n_sims * TRUTH.numel())
    assert lo - 0.02 <= hits / (n_sims * TRUTH.numel()) <= hi


def test_patching_intervals_save_load_and_show_in_dataframe(tmp_path):
    r = _result(TRUTH + 0.1 * torch.randn(20, 3, 2))
    back = PatchingResult.load(r.save(tmp_path / "p.pt"))
    assert torch.equal(back.head_low, r.head_low) and back.ci_seed == r.ci_seed
    df = back.to_dataframe()
    heads = df[df.kind == "head"]
    assert (heads.effect_low <= heads.effect).all() and (heads.effect <= heads.effect_high).all()
    assert df[df.kind == "mlp"].effect_low.isna().all()  # no per-pair MLP effects, so no MLP interval
    assert df[df.kind == "mlp"]["head"].isna().all() and (df[df.kind == "head"]["head"] >= 0).all()


def test_patching_dataframe_without_per_pair_effects_drops_the_intervals_and_says_why():
    r = PatchingResult(
        head_effects=TRUTH, mlp_effects=torch.zeros(3), metric="logit_diff", method="exact", model=SPEC, n_pairs=20
    )
    with pytest.warns(UserWarning, match=r"no per-pair effects.*Fix: path_patch\(\.\.\., keep_per_pair=True\)"):
        df = r.to_dataframe()
    assert not {"effect_low", "effect_high"} & set(df.columns), "no column of NaN posing as intervals"
    assert list(df["effect"][df.kind == "head"]) == TRUTH.flatten().tolist()


def test_key_components_dataframe_gives_mlps_no_head():
    key = KeyComponents(
        model=SPEC, heads=(Head(0, 1), Head(2, 0)), mlps=(1,), head_scores=(-0.3, -0.1), mlp_scores=(-0.2,)
    )
    df = key.to_dataframe()
    assert list(df["kind"]) == ["head", "head", "mlp"]
    assert df["head"].isna().tolist() == [False, False, True] and list(df["head"][:2]) == [1, 0]
    assert str(df["head"].dtype) == "Int64" and list(df["layer"]) == [0, 2, 1]


def test_knockout_dataframe_carries_wilson_interval_and_random_spread():
    from mathcircuits.ablation import KnockoutResult

    r = KnockoutResult(
        ks=[0, 1],
        ranked_accuracy=[0.5, 0.25],
        random_accuracy=torch.tensor([[0.5, 0.4], [0.5, 0.5]]),
        baseline_accuracy=0.5,
        operation="add",
        n_pairs=8,
    )
    df = r.to_dataframe()
    assert (df.ranked_low < df.ranked_accuracy).all() and (df.ranked_accuracy < df.ranked_high).all()
    assert df.random_min.tolist() == pytest.approx([0.5, 0.4]) and df.random_max.tolist() == [0.5, 0.5]
