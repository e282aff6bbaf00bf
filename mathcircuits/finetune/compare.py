"""The fair comparison of fine-tuning modes: its settings, and the helpers its units use.

Background. Zhang et al. (ICML 2024, §5, Tables 1–2) claim that precise SFT of the key heads
matches full SFT on math at a fraction of the cost. A fair test gives every mode the same training
examples in the same order, the same number of optimizer steps and the same batch, and each its
own learning rate (a sparse update usually needs a larger step than a dense one, so one shared rate
favours whichever mode it suits); several training seeds per mode; a random-heads control matched
in depth and parameters (Wang & Veitch 2025); LoRA on the same parameter budget (LoFiT, Yin et al.
2024); and held-out facts the model never trained on, in any wording.

The protocol runs as resumable units (:mod:`mathcircuits.finetune.units`: a coarse learning-rate
sweep on few steps, each mode's best rate on a validation split, then that rate trained longer with
several seeds); :mod:`~mathcircuits.finetune.run_unit` trains one unit;
:mod:`~mathcircuits.finetune.effects` turns the units into changes against base with intervals over
items and seeds. This module holds the settings (:class:`CompareConfig`, the ``compare`` section of a
run config) and the helpers: the mode names (:data:`MODE_PATTERN`), uniform random heads, the LoRA
rank on precise's budget, and teacher-forced arithmetic scoring.

Modes (:data:`MODE_PATTERN`; one definition of "precise" everywhere):

* ``base`` — no training (the reference row, always scored);
* ``precise`` — the key heads only (q/k/v/o slices, see :mod:`~mathcircuits.finetune.slices`);
* ``precise+mlp`` — the key heads and the key MLPs;
* ``precise@K`` / ``precise@K+mlp`` — the top-K heads of a ranking by path-patching effect (Table 2);
* ``random`` — as many non-key heads per layer as the key heads, tuning as many KV groups
  (:func:`~mathcircuits.finetune.matched.matched_random_heads`; one draw per seed);
* ``lora`` — PEFT LoRA on every attention projection with the rank whose parameter count is nearest
  to ``precise``'s (:func:`lora_rank_for_budget`);
* ``full`` — every parameter.

Usage::

    cfg = CompareConfig(enabled=True, modes=("precise", "random", "lora", "full"), seeds=3)
    plan = cfg.plan(final_steps=60)       # a UnitPlan: grids per mode, steps, seeds
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import datasets
import torch
from torch import nn

from mathcircuits._schema import ConfigError, check_fields, setting
from mathcircuits.data import score_pairs
from mathcircuits.finetune.train import lora_targets
from mathcircuits.finetune.units import UnitPlan
from mathcircuits.models.prefix import HFForward, PrefixRunner

__all__ = [
    "MODE_PATTERN",
    "CompareConfig",
    "check_modes",
    "lora_rank_for_budget",
    "random_heads",
    "score_arithmetic",
]

MODE_PATTERN = re.compile(r"^(base|precise|precise\+mlp|precise@[1-9][0-9]*(\+mlp)?|random|lora|full)$")


@dataclass(frozen=True)
class CompareConfig:
    """What the comparison trains, on which grids, for how long, with how many seeds, on which facts.

    The shared training settings (batch, schedule, decay, the final units' ``max_steps``, the operand
    range and training pairs per template) are the ``finetune`` section's; the generic benchmarks and
    their item count are the ``evaluation`` section's (likelihood benchmarks, scored through lm-eval).

    Args:
        enabled: run the ``compare`` stage.
        modes: the trained modes (:data:`MODE_PATTERN`); ``base`` is always scored.
        learning_rates: the grid of ``full`` SFT.
        sparse_learning_rates: the grid of the head modes and LoRA (sparse updates want larger rates).
        sweep_steps: optimizer steps of a sweep unit (the final units train ``finetune.max_steps``).
        seeds: training seeds of each mode at its chosen rate (``random``: one draw per seed).
        sweep_generic: generic items per benchmark a sweep unit is scored on (for the Pareto figure; 0: none).
        kv_sensitivity: also train ``precise`` with ``kv_policy: exclusive`` at its chosen rate (when ``precise``
            is among the modes).
        select_on: the validation score a rate is chosen on (mean answer log-probability, or accuracy).
        validation_pairs_per_template: pairs per template of the validation facts.
        test_pairs_per_template: pairs per template of the test facts.
        fact_shares: shares of the facts ``(operation, a, b)`` for training, validation and test (disjoint).
        bare_prompts: train and score on the bare problem (``"3 + 5 = "``), without the few-shot prefix.
        niceness: raise the stage's process to this ``nice`` level (0: leave it).
    """

    enabled: bool = setting(False, "run the compare stage (a learning-rate sweep per mode, then seeds: slow)")
    modes: tuple[str, ...] = setting(
        ("precise", "precise+mlp", "random", "lora", "full"),
        "precise | precise+mlp | precise@K[+mlp] | random (matched heads) | lora | full; base is always scored",
    )
    learning_rates: tuple[float, ...] = setting((1e-5, 3e-5, 1e-4, 3e-4), "learning-rate grid of full SFT")
    sparse_learning_rates: tuple[float, ...] = setting(
        (1e-4, 3e-4, 1e-3, 3e-3, 1e-2), "learning-rate grid of the head modes and LoRA"
    )
    sweep_steps: int = setting(20, "optimizer steps of a sweep unit", ge=1)
    seeds: int = setting(3, "training seeds per mode at its chosen rate (random: one draw each)", ge=1)
    sweep_generic: int = setting(50, "generic items per benchmark scored by a sweep unit (0: none)", ge=0)
    kv_sensitivity: bool = setting(
        True, "also train precise with kv_policy exclusive at its chosen rate (when precise is a mode)"
    )
    select_on: Literal["logp", "accuracy"] = setting("logp", "validation score the rate is chosen on")
    validation_pairs_per_template: int = setting(8, "pairs per template of the validation facts", ge=1)
    test_pairs_per_template: int = setting(24, "pairs per template of the test facts", ge=1)
    fact_shares: tuple[float, float, float] = setting(
        (0.5, 0.2, 0.3), "shares of the facts (operation, a, b) for train, validation, test"
    )
    bare_prompts: bool = setting(True, "bare problem and answer, no few-shot prefix (training and scoring)")
    niceness: int = setting(0, "nice level the stage raises itself to (0: leave it; 19: lowest priority)", ge=0, le=19)

    def __post_init__(self) -> None:
        check_fields(self)
        try:
            check_modes(self.modes)
        except ValueError as err:
            raise ConfigError(str(err)) from err
        if not self.trained_modes:
            raise ConfigError(
                "compare.modes is empty (base alone trains nothing). "
                "Fix: list modes, e.g. [precise, random, lora, full]."
            )
        for name in ("learning_rates", "sparse_learning_rates"):
            rates = getattr(self, name)
            if not rates or any(not (lr > 0 and math.isfinite(lr)) for lr in rates):
                raise ConfigError(f"compare.{name}={list(rates)}. Fix: give at least one positive, finite rate.")
        if any(not x > 0 for x in self.fact_shares) or sum(self.fact_shares) > 1 + 1e-9:
            raise ConfigError(
                f"compare.fact_shares={list(self.fact_shares)}. Fix: three positive shares summing to at most 1."
            )

    @property
    def trained_modes(self) -> tuple[str, ...]:
        """The modes that train (every mode but ``base``)."""
        return tuple(m for m in self.modes if m != "base")

    def grid(self, mode: str) -> tuple[float, ...]:
        """The learning-rate grid of ``mode``, ascending."""
        return tuple(sorted(self.learning_rates if mode == "full" else self.sparse_learning_rates))

    def plan(self, final_steps: int) -> UnitPlan:
        """The :class:`~mathcircuits.finetune.units.UnitPlan` of these settings.

        Args:
            final_steps: optimizer steps of the final units (``finetune.max_steps``).

        Returns:
            The plan.
        """
        if final_steps < 1:
            raise ConfigError(f"finetune.max_steps={final_steps}: the compare stage needs a positive number of steps.")
        return UnitPlan(
            modes=self.trained_modes,
            grids={m: self.grid(m) for m in self.trained_modes},
            sweep_steps=self.sweep_steps,
            steps=final_steps,
            seeds=tuple(range(self.seeds)),
            sweep_generic=self.sweep_generic,
            kv_sensitivity=self.kv_sensitivity and "precise" in self.trained_modes,
            select_on=self.select_on,
        )


def check_modes(modes: Sequence[str]) -> tuple[str, ...]:
    """Check mode names against :data:`MODE_PATTERN`.

    Args:
        modes: mode names, e.g. ``("base", "precise", "precise@4", "random", "lora", "full")``.

    Returns:
        The modes as a tuple.

    Raises:
        ValueError: an unknown or repeated mode.
    """
    bad = [m for m in modes if not MODE_PATTERN.match(m)]
    if bad or len(set(modes)) != len(modes):
        raise ValueError(
            f"comparison modes {list(modes)}: {bad or 'repeated names'} not allowed. Fix: use each of base, "
            "precise, precise+mlp, precise@K, precise@K+mlp, random, lora, full at most once."
        )
    return tuple(modes)


def random_heads(
    n_layers: int, n_heads: int, count: int, exclude: Sequence[tuple[int, int]] = (), seed: int = 0
) -> tuple[tuple[int, int], ...]:
    """``count`` heads drawn uniformly without replacement from those not in ``exclude`` (seeded).

    Args:
        n_layers: layers of the model.
        n_heads: query heads per layer.
        count: how many heads.
        exclude: heads never drawn (the key heads).
        seed: seed of the draw.

    Returns:
        The heads, sorted by (layer, head).

    Raises:
        ValueError: fewer than ``count`` heads are left to draw from.
    """
    pool = [(layer, h) for layer in range(n_layers) for h in range(n_heads) if (layer, h) not in set(exclude)]
    if count > len(pool):
        raise ValueError(f"cannot draw {count} random heads from the {len(pool)} non-key heads. Fix: tune fewer.")
    order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))[:count]
    return tuple(sorted(pool[i] for i in order.tolist()))


def lora_rank_for_budget(model: nn.Module, budget: int) -> tuple[int, int]:
    """The LoRA rank on the attention projections whose parameter count is nearest to ``budget``.

    A rank-``r`` LoRA of an ``[out, in]`` weight has ``r·(in + out)`` parameters, so the count is
    ``r`` times one rank's worth; the nearest rank (at least 1) is within half of one rank's worth
    of ``budget`` (unless ``budget`` is below half a rank).

    Args:
        model: a plain HF causal LM.
        budget: the parameter count to match (e.g. precise SFT's ``n_trainable``).

    Returns:
        ``(rank, parameters per rank)``.
    """
    suffixes = lora_targets(model)
    per_rank = 0
    for name, module in model.named_modules():
        if any(name.endswith("." + s) for s in suffixes):
            per_rank += sum(module.weight.shape)
    if per_rank == 0:
        raise ValueError(f"no module of {type(model).__name__} matches the LoRA targets {suffixes}.")
    return max(1, round(budget / per_rank)), per_rank


def score_arithmetic(model: nn.Module, pairs: datasets.Dataset, batch_size: int = 32) -> list[int]:
    """0/1 per pair: is every answer token the model's greedy prediction (teacher-forced)?

    Each template's few-shot prefix runs once (:class:`~mathcircuits.models.prefix.PrefixRunner` over
    :class:`~mathcircuits.models.prefix.HFForward`); equal to the plain forward within 1e-5 (tested).

    Args:
        model: an HF causal LM (eval mode).
        pairs: arithmetic pairs (``tokens``, ``answer_tokens``, ``n_tokens``).
        batch_size: pairs per forward pass.

    Returns:
        One 0/1 value per pair, in the pairs' order.
    """
    device = next(model.parameters()).device
    with torch.no_grad():  # the prefix-cached forward: each template's few-shot prefix runs once
        scored = score_pairs(PrefixRunner(HFForward(model)), pairs, batch_size=batch_size, device=device)
    return [int(bool(c)) for c in scored["correct"]]
