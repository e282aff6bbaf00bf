"""The comparison's machinery on tiny-llama: units resume after a SIGKILL, seeds differ, the edge flag fires.

Also the pieces it rests on: fact splits that share no (operation, a, b), the depth- and parameter-matched
random heads, the non-key heads changed through shared K/V, and the seed-and-item interval and power formula.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mathcircuits.data import GenerationConfig, drop_facts, generate_pairs
from mathcircuits.data.facts import facts_of, split_facts
from mathcircuits.finetune import ItemScores, Mode, Unit, UnitRecord, compare_units, head_slices
from mathcircuits.finetune.layouts import model_facts
from mathcircuits.finetune.matched import kv_shared_heads, matched_random_heads
from mathcircuits.finetune.protocol import choose_rates, units_remaining
from mathcircuits.models import Head, ModelSpec, load_hf_model
from mathcircuits.patching import KeyComponents
from mathcircuits.power import detectable_difference, planned_detectable_difference, seed_item_bootstrap
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.bootstrap import paired_bootstrap

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import units_job  # noqa: E402  (the tiny comparison, shared with the subprocess)


@pytest.fixture(scope="module")
def job():
    return units_job.setup()


@pytest.mark.integration  # kills a child process part-way
def test_units_resume_after_sigkill(tmp_path, job):
    root = tmp_path / "units"
    root.mkdir()
    log = root / "executed.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, str(HERE / "units_job.py"), str(root)], env=env)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and len(list(root.glob("**/unit.json"))) < 2:
            assert proc.poll() is None, "the job ended before it could be killed"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    plan, execute = job
    done = {str(p.parent.relative_to(root)) for p in root.glob("**/unit.json")}
    assert 2 <= len(done) < plan.n_units  # killed part-way
    assert units_remaining(plan, root) == plan.n_units - len(done)
    before = log.read_text().split()
    cmp = compare_units(plan, root, units_job.logged(execute, log))
    after = log.read_text().split()[len(before) :]
    assert not set(after) & done  # a saved unit is read back, never retrained
    assert len(after) == plan.n_units - len(done)  # every other unit ran once now (the killed one again)
    assert len(cmp.records) == plan.n_units and units_remaining(plan, root) == 0
    assert not list(root.glob("**/work"))  # no partial training left behind


@pytest.mark.slow  # a whole tiny comparison: 2 modes x (2 rates + 2 seeds) + base (about 7 s of CPU)
def test_seeds_differ_and_the_edge_flag_fires(tmp_path, job):
    plan, execute = job
    cmp = compare_units(plan, tmp_path, execute)
    finals = cmp.final("precise")
    assert [r.unit.seed for r in finals] == [0, 1] and all(r.global_step == plan.steps for r in finals)
    assert finals[0].train_loss != finals[1].train_loss  # another data order
    assert finals[0].math["test"].logp != finals[1].math["test"].logp
    # a 2-step sweep on tiny-llama: the largest rate raises the answer's log-probability most
    for mode in ("precise", "full"):
        c = cmp.choices[mode]
        assert c.scores[-1] == max(c.scores) and c.learning_rate == max(c.grid)
        assert c.at_edge and c.edge == "largest"
    base = cmp.final("base")[0]
    assert set(base.math) == {"validation", "test"} and base.n_trainable == 0
    full = cmp.final("full")[0]
    assert full.n_trainable == sum(p.numel() for p in load_hf_model("tiny-llama")[0].parameters())
    assert cmp.final("precise")[0].kv_shared_heads == ((0, 0), (1, 3))  # their KV groups' other heads


def _record(mode: str, lr: float, logp: float) -> UnitRecord:
    scores = ItemScores((1, 0), (logp, logp))
    return UnitRecord(
        Unit(Mode.parse(mode), lr, 0, "sweep", steps=1), (), (), (), 0, 1, 0.0, 0.0, 0.0, 0.0, {"validation": scores}
    )


def test_edge_flag_only_at_the_ends_of_the_grid():
    recs = [_record("precise", lr, s) for lr, s in ((1e-4, -3.0), (1e-3, -1.0), (1e-2, -2.0))]
    recs += [_record("full", lr, s) for lr, s in ((1e-5, -1.0), (1e-4, -1.0), (1e-3, -4.0))]
    choices = choose_rates(recs)
    assert choices["precise"].learning_rate == 1e-3 and not choices["precise"].at_edge
    assert choices["full"].learning_rate == 1e-5 and choices["full"].edge == "smallest"  # tie: the smaller rate


def test_fact_splits_share_no_fact(template_sets):
    tok = load_hf_model("tiny-llama")[1]
    gen = GenerationConfig(operations=("add", "sub"), operand_range=(1, 12))
    parts = split_facts(gen, {"train": 0.5, "validation": 0.2, "test": 0.3}, seed=3)
    assert not (parts["train"] & parts["test"]) and not (parts["validation"] & parts["test"])
    for op in ("add", "sub"):  # each operation in the same proportions
        n = {k: sum(f[0] == op for f in v) for k, v in parts.items()}
        assert abs(n["test"] / sum(n.values()) - 0.3) < 0.02
    ids = ("add_eq_1", "add_st_1", "sub_eq_1")
    cfg = GenerationConfig(operations=("add", "sub"), operand_range=(1, 12), template_ids=ids, n_per_template=40)
    train = generate_pairs(tok, template_sets, cfg, facts=parts["train"])
    assert facts_of(train) <= parts["train"]
    other = generate_pairs(tok, template_sets, GenerationConfig(**{**cfg.to_dict(), "seed": 9}))
    by_prompt = other.where([p not in set(train.prompts) for p in other.prompts])
    assert facts_of(by_prompt) & facts_of(train)  # deduplicating by prompt string keeps trained facts
    assert not facts_of(drop_facts(other, facts_of(train))) & facts_of(train)


def test_matched_random_heads_match_depth_and_parameters():
    smol = ModelSpec("smol", "smol", "LlamaForCausalLM", 30, 9, 3, 64, 576, 1536, 49152, "llama")
    key = ((13, 6), (14, 1), (14, 2), (18, 5))  # KV groups (13,2) (14,0) (18,1)
    draws = [matched_random_heads(smol, key, "group", seed=s) for s in range(5)]
    for d in draws:
        assert d.exact and d.outside_key_groups and not set(d.heads) & set(key)
        assert sorted(layer for layer, _ in d.heads) == sorted(layer for layer, _ in key)  # depth-matched
        assert len(d.kv_groups) == 3  # as many KV groups as the key heads tune
        assert not {(layer, h // 3) for layer, h in d.heads} & {(layer, h // 3) for layer, h in key}
    assert len({d.heads for d in draws}) > 1  # seeds draw different heads
    # two key heads in two groups of a layer leave one free group: parameters match, key groups are shared
    d = matched_random_heads(smol, (*key, (21, 2), (21, 7)), "group", seed=0)
    assert d.exact and not d.outside_key_groups and len(d.kv_groups) == 5
    model = load_hf_model("tiny-llama")[0]
    facts = model_facts(model)
    tiny_key = KeyComponents(model=facts, heads=(Head(0, 1), Head(1, 2), Head(1, 3)))
    n_key = head_slices(model, tiny_key).n_tuned
    for seed in range(4):
        d = matched_random_heads(facts, tiny_key.heads, "group", seed=seed)
        n = head_slices(model, KeyComponents(model=facts, heads=d.heads)).n_tuned
        assert d.exact and n == n_key  # parameter-matched exactly


def test_kv_shared_heads_under_each_policy():
    model = load_hf_model("tiny-llama")[0]  # 4 query heads, 2 KV heads: groups of 2
    key = KeyComponents(model=model_facts(model), heads=(Head(0, 1), Head(1, 2), Head(1, 3)))
    assert kv_shared_heads(head_slices(model, key, kv_policy="group")) == ((0, 0),)
    assert kv_shared_heads(head_slices(model, key, kv_policy="exclusive")) == ()


def test_seed_item_interval_includes_seed_variance():
    g = torch.Generator().manual_seed(0)
    items = torch.rand(1, 400, generator=g).expand(3, 400)  # item difficulty, shared
    quiet = items + 0.001 * torch.randn(3, 400, generator=g)
    noisy = items + torch.tensor([[-0.1], [0.0], [0.1]]) + 0.001 * torch.randn(3, 400, generator=g)
    base = items[:1]
    u = Uncertainty(seed=1)
    q, n = seed_item_bootstrap(quiet, base, u), seed_item_bootstrap(noisy, base, u)
    item_only = paired_bootstrap(noisy.mean(0), base[0], u)
    assert n.high - n.low > 10 * (item_only.high - item_only.low)  # seeds that disagree widen the interval
    assert q.high - q.low < 0.01 and q.contains(float(quiet.mean() - base.mean()))
    with pytest.raises(ValueError, match="same items"):
        seed_item_bootstrap(quiet.tolist(), base[:, :10].tolist())


def test_detectable_difference_has_the_power_it_states():
    p = planned_detectable_difference(0.5, 300, 0.03, 0.03, 3, 3)
    assert math.isclose(p.se, math.sqrt(0.25 / 300 + 2 * 0.0009 / 3))
    assert math.isclose(p.mdd, 2.8016 * p.se, rel_tol=1e-3)
    g = torch.Generator().manual_seed(0)
    hits = 0
    sims = 400
    for _ in range(sims):  # a true difference of exactly the MDD, drawn as the formula assumes
        seeds_a = p.mdd + 0.03 * torch.randn(3, 1, generator=g)
        seeds_b = 0.03 * torch.randn(3, 1, generator=g)
        noise = 0.25 * torch.randn(1, 300, generator=g)  # the paired difference a − b has SD 0.5 over items
        a, b = seeds_a + noise, seeds_b - noise
        hits += abs(float(a.mean() - b.mean())) / p.se > 1.959964
    assert 0.72 < hits / sims < 0.88  # 80% power, within simulation error
    observed = detectable_difference(torch.zeros(3, 50), torch.ones(2, 50))
    assert observed.item_sd == 0 and observed.mdd == 0 and observed.n_seeds_b == 2
