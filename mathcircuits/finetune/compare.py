"""The fair comparison of fine-tuning modes: its settings, and the helpers its units use.

Zhang et al. (ICML 2024, §5, Tables 1–2) claim that precise SFT of the key heads matches full SFT on math at a
fraction of the cost. A fair test gives every mode the same examples in the same order, the same optimizer steps
and batch, and each its own learning rate (a sparse update usually needs a larger step than a dense one, so one
shared rate favours whichever mode it suits); several training seeds per mode; a random-heads control matched in
depth and parameters (Wang & Veitch 2025); LoRA on the same parameter budget (LoFiT, Yin et al. 2024); and
held-out facts the model never trained on, in any wording. The modes are :class:`~mathcircuits.finetune.Mode`;
the protocol is :mod:`mathcircuits.finetune.protocol`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from mathcircuits._errors import FixableValueError
from mathcircuits._schema import ConfigError, check_fields, setting
from mathcircuits.finetune.modes import Mode
from mathcircuits.finetune.units import UnitPlan

__all__ = [
    "CompareConfig",
]


@dataclass(frozen=True)
class CompareConfig:
    """What the comparison trains, on which grids, for how long, with how many seeds, on which facts.

    The shared training settings (batch, schedule, decay, the final units' ``max_steps``, the operand range and
    training pairs per template) are the ``finetune`` section's; the generic benchmarks and their item count the
    ``evaluation`` section's. ``learning_rates`` is the grid of ``full``, ``sparse_learning_rates`` that of the head
    modes and LoRA. ``sweep_generic``: generic items per benchmark a sweep unit is scored on (0: none).
    ``kv_sensitivity`` also trains ``precise`` with ``kv_policy: exclusive`` at its chosen rate. ``fact_shares``:
    disjoint shares of the facts ``(operation, a, b)`` for training, validation and test. ``bare_prompts``: no
    few-shot prefix (``"3 + 5 = "``). ``niceness``: the stage's ``nice`` level (0: leave it).
    """

    enabled: bool = setting(False, "run the compare stage (a learning-rate sweep per mode, then seeds: slow)")
    modes: tuple[Mode, ...] = setting(
        tuple(Mode.parse(m) for m in ("precise", "precise+mlp", "random", "lora", "full")),
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
                "compare.modes is empty (base alone trains nothing). ",
                "list modes, e.g. [precise, random, lora, full].",
            )
        for name in ("learning_rates", "sparse_learning_rates"):
            rates = getattr(self, name)
            if not rates or any(not (lr > 0 and math.isfinite(lr)) for lr in rates):
                raise ConfigError(f"compare.{name}={list(rates)}. ", "give at least one positive, finite rate.")
        if any(not x > 0 for x in self.fact_shares) or sum(self.fact_shares) > 1 + 1e-9:
            raise ConfigError(
                f"compare.fact_shares={list(self.fact_shares)}. ", "three positive shares summing to at most 1."
            )

    @property
    def trained_modes(self) -> tuple[Mode, ...]:
        """The modes that train (every mode but ``base``)."""
        return tuple(m for m in self.modes if m.kind != "base")

    def grid(self, mode: Mode | str) -> tuple[float, ...]:
        """The learning-rate grid of ``mode``, ascending."""
        full = Mode.parse(mode).kind == "full"
        return tuple(sorted(self.learning_rates if full else self.sparse_learning_rates))

    def plan(self, final_steps: int) -> UnitPlan:
        """The :class:`~mathcircuits.finetune.units.UnitPlan` of these settings.

        ``final_steps`` is ``finetune.max_steps``.
        """
        if final_steps < 1:
            raise ConfigError(f"finetune.max_steps={final_steps}: the compare stage needs a positive number of steps.")
        modes = tuple(str(m) for m in self.trained_modes)  # units keep a mode as its text
        return UnitPlan(
            modes=modes,
            grids={str(m): self.grid(m) for m in self.trained_modes},
            sweep_steps=self.sweep_steps,
            steps=final_steps,
            seeds=tuple(range(self.seeds)),
            sweep_generic=self.sweep_generic,
            kv_sensitivity=self.kv_sensitivity and "precise" in modes,
            select_on=self.select_on,
        )


def check_modes(modes: Sequence[Mode | str]) -> tuple[Mode, ...]:
    """The modes of a comparison, parsed; each may appear once."""
    parsed, bad = [], []
    for m in modes:
        try:
            parsed.append(Mode.parse(m))
        except ValueError:
            bad.append(str(m))
    if bad or len(set(parsed)) != len(parsed):
        raise FixableValueError(
            f"comparison modes {[str(m) for m in modes]}: {bad or 'repeated names'} not allowed. ",
            "use each of base, precise, precise+mlp, precise@K, precise@K+mlp, random, lora, full at most once.",
        )
    return tuple(parsed)
