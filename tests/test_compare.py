"""The fine-tuning comparison's modes and helpers (mathcircuits.finetune.compare / run_unit) on tiny-llama, offline."""

from __future__ import annotations

import pytest
import torch

from mathcircuits.finetune import CompareConfig, Mode, Unit, head_slices
from mathcircuits.finetune.compare import check_modes
from mathcircuits.finetune.components import lora_rank_for_budget, random_heads
from mathcircuits.finetune.layouts import model_facts
from mathcircuits.finetune.run_unit import unit_components
from mathcircuits.models import Head, load_hf_model
from mathcircuits.patching import KeyComponents
from mathcircuits.pipeline import ConfigError


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    model, _ = load_hf_model("tiny-llama")
    key = KeyComponents(model=model_facts(model), heads=(Head(0, 1), Head(1, 2)), mlps=(1,))
    return model, key


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
    model, _ = setup
    for budget in (1000, 8192, 30000):
        rank, per_rank = lora_rank_for_budget(model, budget)
        assert abs(rank * per_rank - budget) <= per_rank / 2


def test_one_definition_of_precise(setup):
    model, key = setup
    precise = unit_components(model, Unit(Mode.parse("precise"), 1e-3), key)
    assert precise.heads == key.heads and precise.mlps == ()  # heads only
    with_mlps = unit_components(model, Unit(Mode.parse("precise+mlp"), 1e-3), key)
    assert with_mlps.heads == key.heads and with_mlps.mlps == (1,)  # labelled +mlp
    top = unit_components(model, Unit(Mode.parse("precise@1+mlp"), 1e-3), key, ranking=[(1, 3), (0, 0)])
    assert top.heads == ((1, 3),) and top.mlps == (1,)
    with pytest.raises(ValueError, match="ranking of at least 2"):
        unit_components(model, Unit(Mode.parse("precise@2"), 1e-3), key, ranking=[(1, 3)])
    draws = [unit_components(model, Unit(Mode.parse("random"), 1e-3, seed=s), key) for s in range(4)]
    n = head_slices(model, KeyComponents(model=key.model, heads=key.heads)).n_tuned
    for d in draws:  # depth- and parameter-matched, never a key head
        assert sorted(layer for layer, _ in d.heads) == [0, 1] and not set(d.heads) & set(key.heads)
        assert head_slices(model, d).n_tuned == n
    assert unit_components(model, Unit(Mode.parse("full"), 1e-3), key) is None


def test_compare_config_checks_and_plans():
    modes = tuple(map(Mode.parse, ("base", "precise", "full")))
    cfg = CompareConfig(enabled=True, modes=modes, seeds=2, kv_sensitivity=True)
    plan = cfg.plan(final_steps=10)
    assert plan.modes == ("precise", "full") and plan.grids["full"] == cfg.grid("full")
    assert plan.grids["precise"] == tuple(sorted(cfg.sparse_learning_rates)) and plan.seeds == (0, 1)
    assert plan.n_units == 1 + 4 + 5 + 3 * 2  # base, the sweep, 2 modes + the kv sensitivity run at 2 seeds
    with pytest.raises(ConfigError, match="empty"):
        CompareConfig(modes=(Mode("base"),))
    assert not CompareConfig(modes=(Mode("full"),), kv_sensitivity=True).plan(10).kv_sensitivity  # only with precise
    with pytest.raises(ConfigError, match="fact_shares"):
        CompareConfig(fact_shares=(0.6, 0.3, 0.3))
    with pytest.raises(ConfigError, match="positive, finite"):
        CompareConfig(sparse_learning_rates=(1e-3, -1e-3))
