"""Settings of the number analyses (spectra, probes, helix, heuristic neurons): the ``numbers`` section of a run.

The stage is off unless a config turns it on: ``configs/default.yaml`` runs it at a small size (4 contexts,
a 10 × 10 grid) that fits the main job's 10 minutes on a 2-core CPU; ``configs/thorough.yaml`` at full size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mathcircuits._schema import ConfigError, check_fields, setting
from mathcircuits.data import Operation
from mathcircuits.stats import Uncertainty

__all__ = ["NumbersConfig"]


@dataclass(frozen=True)
class NumbersConfig:
    """How the numbers stage reads numbers and which nulls it draws."""

    DEFAULT_PROMPTS: ClassVar[int] = 100 * 8 + 20 * 20  # estimated_prompts() of the defaults

    enabled: bool = setting(False, "run the numbers stage (minutes on a CPU; on in configs/thorough.yaml)")
    template: str = setting("add_eq_1", "template of the operand grid and the helix patch (its context comes first)")
    numbers: tuple[int, int] = setting((0, 99), "inclusive range of the number axis of spectra, probes and helix")
    contexts: int = setting(8, "contexts (template prefixes) each number is read in; the probes hold them out", ge=2)
    context_operations: tuple[Operation, ...] = setting(("add", "sub", "mul", "div"), "operations giving contexts")
    periods: tuple[int, ...] = setting((2, 5, 10, 100), "periods T of the mod-T probes and of the helix")
    n_shuffles: int = setting(
        200,
        "shuffled-order spectra per row (the spectra's null)",
        ge=20,
        le=100_000,
        why="each shuffle is one more spectrum per row",
    )
    probe_folds: int = setting(4, "cross-validation folds of the probes (whole contexts held out)", ge=2)
    patch_depths: tuple[int, ...] = setting((), "depths patched a -> a'; empty: the best helix depth and the middle")
    patch_pairs: int = setting(
        48, "prompt pairs of the helix patch", ge=4, le=100_000, why="each pair is patched at every depth and subspace"
    )
    patch_b: tuple[int, int] = setting((1, 9), "range of the second operand in the helix patch")
    n_random_subspaces: int = setting(10, "random subspaces of the helix's dimension per patched depth", ge=1)
    grid: tuple[int, int] = setting((0, 19), "inclusive operand range of the neuron grid (full a x b grid)")
    neuron_layers: tuple[int, ...] | None = setting(
        None, "MLP layers of the neuron analysis; null: the key MLPs of identify (all layers on models of <= 4)"
    )
    topk_fractions: tuple[float, ...] = setting(
        (0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5), "shares of a layer's neurons tried as its top-k"
    )
    accuracy_margin: float = setting(0.05, "the sufficient top-k keeps accuracy >= 1 - margin", ge=0, lt=1)
    min_corr: float = setting(0.5, "a neuron implements a heuristic when |r| with its pattern >= this", gt=0, le=1)
    n_random_knockouts: int = setting(20, "layer-matched random knockouts (>= 20)", ge=20)
    eval_prompts: int = setting(256, "correct grid prompts that score the neuron ablations", ge=8)
    batch_size: int = setting(32, "prompts per forward", ge=1)
    n_boot: int = setting(1000, "bootstrap resamples", ge=10)
    seed: int = setting(0, "seed of shuffles, folds, draws and resamples")
    max_prompts: int = setting(
        20_000, "refuse ranges whose estimated prompt count (estimated_prompts) is above this, at load", ge=1
    )

    def uncertainty(self) -> Uncertainty:
        """The stage's bootstrap: ``n_boot`` resamples from ``seed`` (which also draws its shuffles and folds)."""
        return Uncertainty(n_boot=self.n_boot, seed=self.seed)

    def estimated_prompts(self) -> int:
        """Prompts run forward, to first order: ``numbers x contexts + grid operands²`` (the grid also backward)."""
        n, g = self.numbers[1] - self.numbers[0] + 1, self.grid[1] - self.grid[0] + 1
        return n * self.contexts + g * g

    def __post_init__(self) -> None:
        check_fields(self)
        if "pow" in self.context_operations:
            raise ConfigError(
                f"numbers.context_operations={list(self.context_operations)}: the numbers stage reads contexts of "
                "add, sub, mul and div only. ",
                "drop pow.",
            )
        for name in ("numbers", "grid", "patch_b"):
            lo, hi = getattr(self, name)
            if not 0 <= lo < hi:
                raise ConfigError(
                    f"numbers.{name}={[lo, hi]} is not a range. ", "give [low, high] with 0 <= low < high."
                )
        lo, hi = self.numbers
        if hi - lo + 1 < 20:
            raise ConfigError(
                f"numbers.numbers={[lo, hi]} has {hi - lo + 1} numbers; the helix and spectra need >= 20. ",
                "use e.g. [0, 99].",
            )
        if self.probe_folds > self.contexts:
            raise ConfigError(
                f"numbers.probe_folds={self.probe_folds} is above numbers.contexts={self.contexts}; each fold holds "
                "out whole contexts, so some folds would test on nothing. ",
                f"set numbers.probe_folds <= {self.contexts}, or raise numbers.contexts.",
            )
        if (cost := self.estimated_prompts()) > self.max_prompts:
            n, g = self.numbers[1] - self.numbers[0] + 1, self.grid[1] - self.grid[0] + 1
            raise ConfigError(
                f"numbers.numbers={list(self.numbers)} and numbers.grid={list(self.grid)} ask for about {cost:,} "
                f"prompts ({n} numbers x {self.contexts} contexts + {g}^2 grid prompts), above "
                f"numbers.max_prompts={self.max_prompts:,} (the defaults take {NumbersConfig.DEFAULT_PROMPTS:,}, "
                "minutes on a CPU). ",
                "narrow numbers.grid (e.g. [0, 19]) and numbers.numbers (e.g. [0, 99]), "
                "or raise numbers.max_prompts if you mean it.",
            )
        if not self.periods or any(t < 2 for t in self.periods):
            raise ConfigError(f"numbers.periods={list(self.periods)} must be >= 2. ", "use e.g. [2, 5, 10, 100].")
        if not self.topk_fractions or any(not 0 < f <= 1 for f in self.topk_fractions):
            raise ConfigError(
                f"numbers.topk_fractions={list(self.topk_fractions)} must lie in (0, 1]. ", "e.g. [0.01, 0.05, 0.2]."
            )
        if any(d < 1 for d in self.patch_depths):
            raise ConfigError(
                f"numbers.patch_depths={list(self.patch_depths)}: a patch enters after at least one block. ",
                "use depths >= 1 (and below the model's layer count).",
            )
