"""A tiny comparison in units on tiny-llama, for tests/test_units.py (run as a script, it is the job a test kills).

``python tests/units_job.py ROOT`` runs :func:`~mathcircuits.finetune.compare_units` in ``ROOT`` and appends
the key of every unit it trains to ``ROOT/executed.log``.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import torch

from mathcircuits.data import GenerationConfig, generate_pairs, load_templates, score_pairs
from mathcircuits.data.facts import split_facts
from mathcircuits.finetune import ItemScores, Scorers, SFTConfig, UnitPlan, build_sft_dataset, compare_units
from mathcircuits.finetune.layouts import model_facts
from mathcircuits.finetune.run_unit import execute_unit
from mathcircuits.models import Head, HFForward, PrefixRunner, load_hf_model
from mathcircuits.patching import KeyComponents


def setup(grids: dict[str, tuple[float, ...]] | None = None, seeds: tuple[int, ...] = (0, 1)):
    """The plan and the unit executor of a tiny comparison (precise and full; 2 steps; no generic benchmarks)."""
    torch.set_num_threads(1)
    model, tok = load_hf_model("tiny-llama")
    gen = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), operand_range=(1, 9), fewshot=False)
    parts = split_facts(gen, {"train": 0.5, "validation": 0.25, "test": 0.25}, seed=0)
    tpl = load_templates()
    pairs = {s: generate_pairs(tok, tpl, GenerationConfig(**{**gen.to_dict(), "n_per_template": 12}), facts=parts[s])
             for s in parts}  # fmt: skip
    key = KeyComponents(model=model_facts(model), heads=(Head(0, 1), Head(1, 2)), mlps=(1,))

    def math(m, split):
        s = score_pairs(PrefixRunner(HFForward(m)), pairs[split])
        return ItemScores(tuple(int(c) for c in s.correct), tuple(float(x) for x in s.logp_answer))

    plan = UnitPlan(
        modes=("precise", "full"),
        grids=grids or {"precise": (1e-3, 3e-2), "full": (1e-4, 3e-3)},
        sweep_steps=2,
        steps=2,
        seeds=seeds,
    )
    execute = partial(
        execute_unit,
        factory=lambda: load_hf_model("tiny-llama")[0],
        tokenizer=tok,
        train_dataset=build_sft_dataset(tok, pairs["train"]),
        key=key,
        config=SFTConfig(batch_size=4, micro_batch_size=4, warmup_ratio=0.0, progress_bar=False, logging_steps=1),
        scorers=Scorers(math, lambda m, n: {}),
    )
    return plan, execute


def logged(execute, log: Path):
    """``execute`` that appends each unit's key to ``log`` before training it."""

    def run(unit, work):
        with open(log, "a") as f:
            f.write(unit.key + "\n")
        return execute(unit, work)

    return run


if __name__ == "__main__":
    root = Path(sys.argv[1])
    plan, execute = setup()
    compare_units(plan, root, logged(execute, root / "executed.log"))
