"""A fair comparison of fine-tuning modes: same data, steps and batch; each mode at its own best learning rate.

Background. Zhang et al. (ICML 2024, §5, Tables 1–2) claim that precise SFT of the key heads (and
a few MLPs) matches full SFT on math at a fraction of the cost. A fair test of that claim needs
every mode to get the same training examples in the same order, the same number of optimizer steps
and the same batch, and each its own learning rate: a sparse update (a few % of the weights) usually
needs a larger step than a dense one, so one shared rate favours whichever mode it suits.

Protocol (:func:`compare_sft`):

1. For every mode and every rate of a small sweep (e.g. 1e-5 … 1e-3), train from the same
   base model with :func:`~mathcircuits.finetune.train_sft` (same seed, data, steps, batch).
2. Score each trained model on a *validation* split (0/1 per item) that is disjoint from the
   training data and from the held-out test items (:func:`split_validation`).
3. Select per mode the rate with the highest validation accuracy (ties: the smallest rate, the
   first in sweep order). Only the selected runs are evaluated on test items, by the caller
   (:func:`load_tuned` rebuilds a selected model from its folder).

Modes (:class:`~mathcircuits.finetune.Mode`; what each tunes is :func:`~mathcircuits.finetune.mode_components`):

* ``base`` — no training (the reference row);
* ``precise`` — the key heads (q/k/v/o slices, see :mod:`~mathcircuits.finetune.slices`);
* ``precise+mlp`` — the key heads and the key MLPs;
* ``precise@K`` / ``precise@K+mlp`` — the top-K heads of a ranking by path-patching effect (Table 2);
* ``random`` — as many heads as ``precise``, drawn uniformly (seeded) from the non-key heads: the
  control the paper lacks;
* ``lora`` — PEFT LoRA on every attention projection with the rank whose parameter count is nearest
  to ``precise``'s (:func:`~mathcircuits.finetune.lora_rank_for_budget`; within half of one rank's parameters);
* ``full`` — every parameter.

Usage::

    cmp = compare_sft(lambda: load_hf_model("embedded")[0], tok, train, val_pairs, key, "runs/cmp",
                      modes=("base", "precise", "lora", "full"), learning_rates=(1e-5, 1e-4, 1e-3))
    cmp.selected            # {"precise": 1e-3, "lora": 1e-4, "full": 1e-5}
    model = load_tuned(lambda: load_hf_model("embedded")[0], cmp.run("precise"))
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import pandas as pd
from torch import nn
from transformers import PreTrainedTokenizerBase

from mathcircuits._io import SavedResult
from mathcircuits._schema import ConfigError, check_fields, setting
from mathcircuits.finetune.adapter import HeadSliceAdapter
from mathcircuits.finetune.components import lora_rank_for_budget, mode_components
from mathcircuits.finetune.config import SFTConfig
from mathcircuits.finetune.modes import Mode
from mathcircuits.finetune.sft import train_sft
from mathcircuits.finetune.slices import head_slices
from mathcircuits.finetune.validation import score_arithmetic
from mathcircuits.patching import KeyComponents

__all__ = ["CompareConfig", "CompareSettings", "SFTComparison", "SweepRun", "check_modes", "compare_sft", "load_tuned"]


@dataclass(frozen=True)
class CompareConfig:
    """What the comparison sweeps (the shared training settings are an :class:`SFTConfig`).

    Args:
        enabled: run the ``compare`` stage.
        modes: the modes compared (:class:`~mathcircuits.finetune.Mode`); ``base`` is the reference row.
        learning_rates: the sweep, the same for every trained mode.
        validation_pairs: arithmetic pairs the rate is selected on (disjoint from training and test).
        random_seed: seed of the ``random`` heads.
    """

    enabled: bool = setting(False, "run the compare stage (a learning-rate sweep per mode: slow)")
    modes: tuple[Mode, ...] = setting(
        tuple(
            Mode.parse(m)
            for m in ("base", "precise", "precise+mlp", "precise@4", "precise@8", "random", "lora", "full")
        ),
        "base | precise | precise+mlp | precise@K[+mlp] | random (as many non-key heads) | lora | full",
    )
    learning_rates: tuple[float, ...] = setting((1e-5, 1e-4, 3e-4, 1e-3), "the sweep, shared by every mode")
    validation_pairs: int = setting(64, "validation pairs the rate is chosen on", ge=1)
    random_seed: int = setting(0, "seed of the random-heads control")

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.modes:
            raise ConfigError(
                "compare.modes is empty, so nothing would be compared. Fix: list modes, e.g. [base, precise, full]."
            )
        try:
            check_modes(self.modes)
        except ValueError as err:
            raise ConfigError(str(err)) from err
        if not self.learning_rates or any(not lr > 0 for lr in self.learning_rates):
            raise ConfigError(f"learning_rates={list(self.learning_rates)}. Fix: give at least one positive rate.")


def check_modes(modes: Sequence[Mode | str]) -> tuple[Mode, ...]:
    """The modes of a comparison, parsed; each may appear once.

    Args:
        modes: modes or their text, e.g. ``("base", "precise", "precise@4", "random", "lora", "full")``.

    Returns:
        The modes as a tuple of :class:`~mathcircuits.finetune.Mode`.

    Raises:
        ValueError: an unknown or repeated mode.
    """
    parsed, bad = [], []
    for m in modes:
        try:
            parsed.append(Mode.parse(m))
        except ValueError:
            bad.append(str(m))
    if bad or len(set(parsed)) != len(parsed):
        raise ValueError(
            f"comparison modes {[str(m) for m in modes]}: {bad or 'repeated names'} not allowed. Fix: use each of "
            "base, precise, precise+mlp, precise@K, precise@K+mlp, random, lora, full at most once."
        )
    return tuple(parsed)


@dataclass(frozen=True)
class CompareSettings:
    """The training settings every mode of a comparison shares, the data sizes and what each mode tuned.

    ``components`` maps a head mode to its heads (``[layer, head]``) and MLPs (``["mlp", layer]``).
    """

    max_steps: int
    epochs: float
    batch_size: int
    train_seed: int
    random_heads_seed: int
    n_train: int
    n_validation: int
    precise_budget: int
    lora_rank: int
    lora_params_per_rank: int
    components: dict[str, list[list[int | str]]] = field(default_factory=dict)


@dataclass(frozen=True, repr=False)
class SweepRun(SavedResult):
    """One (mode, learning rate) run of the sweep and its validation outcome.

    ``learning_rate`` is NaN for ``base``; ``output_dir`` holds the run's ``final`` model or adapter.
    """

    STAGE = "compare"

    mode: Mode
    learning_rate: float
    val_correct: tuple[int, ...]
    n_trainable: int
    global_step: int
    train_loss: float
    runtime_s: float
    samples_per_second: float
    output_dir: str

    @property
    def val_accuracy(self) -> float:
        return sum(self.val_correct) / len(self.val_correct) if self.val_correct else math.nan

    def summary_items(self) -> list[tuple[str, str]]:
        """Mode, learning rate, validation accuracy, steps."""
        return [
            ("mode", str(self.mode)),
            ("learning rate", f"{self.learning_rate:g}"),
            ("validation accuracy", f"{self.val_accuracy:.1%}"),
            ("steps", str(self.global_step)),
        ]


@dataclass(frozen=True, repr=False)
class SFTComparison(SavedResult):
    """The whole sweep, and per mode the selected learning rate (best validation accuracy).

    ``selected`` maps each trained mode (its text) to the chosen rate; ``settings`` records the shared training
    settings (steps, batch, seed, data sizes).
    """

    STAGE = "compare"

    modes: tuple[Mode, ...]
    learning_rates: tuple[float, ...]
    runs: tuple[SweepRun, ...]
    selected: dict[str, float]
    settings: CompareSettings | None = None

    def run(self, mode: Mode | str) -> SweepRun:
        """The selected run of ``mode`` (its best rate on validation; the only run of ``base``)."""
        mode = Mode.parse(mode)
        for r in self.runs:
            if r.mode == mode and (mode.kind == "base" or r.learning_rate == self.selected[str(mode)]):
                return r
        raise KeyError(f"no run of mode {str(mode)!r}; the comparison has {[str(m) for m in self.modes]}.")

    def to_dataframe(self) -> pd.DataFrame:
        """One row per run: mode, learning rate, validation accuracy and n, selected, tuned params, steps, loss."""
        rows = []
        for r in self.runs:
            rows.append(
                {
                    "mode": str(r.mode),
                    "learning_rate": r.learning_rate,
                    "val_accuracy": r.val_accuracy,
                    "val_n": len(r.val_correct),
                    "selected": r.mode.kind == "base" or self.selected.get(str(r.mode)) == r.learning_rate,
                    "n_trainable": r.n_trainable,
                    "global_step": r.global_step,
                    "train_loss": r.train_loss,
                    "samples_per_second": r.samples_per_second,
                }
            )
        return pd.DataFrame(rows)

    def summary_items(self) -> list[tuple[str, str]]:
        """The modes and each one's selected learning rate."""
        return [("modes", ", ".join(map(str, self.modes)))] + [(m, f"lr {lr:g}") for m, lr in self.selected.items()]


def _select(runs: Sequence[SweepRun]) -> float:
    best = max(r.val_accuracy for r in runs)
    return min(r.learning_rate for r in runs if r.val_accuracy == best)  # ties: the smallest rate


def compare_sft(
    model_factory: Callable[[], nn.Module],
    tokenizer: PreTrainedTokenizerBase,
    train_dataset: datasets.Dataset,
    validation_pairs: datasets.Dataset,
    key: KeyComponents,
    output_dir: str | Path,
    modes: Sequence[Mode | str] = ("base", "precise", "precise+mlp", "random", "lora", "full"),
    learning_rates: Sequence[float] = (1e-5, 1e-4, 3e-4, 1e-3),
    config: SFTConfig | None = None,
    head_ranking: Sequence[tuple[int, int]] = (),
    seed: int = 0,
    score: Callable[[nn.Module], Sequence[int]] | None = None,
    model_name: str | None = None,
) -> SFTComparison:
    """Train every mode at every rate of the sweep (same data, steps, batch, seed); select each mode's rate.

    Each run lives in ``<output_dir>/<mode>/lr_<rate>/`` (``final`` model or adapter, ``sweep_run.json``);
    a run whose ``sweep_run.json`` exists is read back, not retrained, so an interrupted sweep resumes.

    Args:
        model_factory: returns a fresh copy of the base HF model (one per run).
        tokenizer: its tokenizer.
        train_dataset: SFT examples (``input_ids``, ``labels``; :func:`~mathcircuits.finetune.build_sft_dataset`).
        validation_pairs: arithmetic pairs the rate is chosen on (disjoint from test; :func:`split_validation`).
        key: the key components (heads and MLPs) from path patching.
        output_dir: folder of the runs.
        modes: which modes (:class:`~mathcircuits.finetune.Mode` or their text).
        learning_rates: the sweep, shared by every trained mode.
        config: shared settings (steps, batch, schedule, decay; None: 100 steps of batch 8); its ``mode``,
            ``learning_rate``, ``include_mlps`` and ``lora_rank`` are set per run.
        head_ranking: every head, best first, for ``precise@K``.
        seed: seed of the ``random`` heads (training uses ``config.seed``).
        score: model → 0/1 per validation item (default: :func:`score_arithmetic` on ``validation_pairs``).
        model_name: the model's name, to check ``key`` against.

    Returns:
        The :class:`SFTComparison` (also saved as ``<output_dir>/comparison.json``).
    """
    modes = check_modes(modes)
    config = config or SFTConfig(max_steps=100, batch_size=8)
    if not learning_rates or any(not lr > 0 for lr in learning_rates):
        raise ValueError(f"learning_rates={list(learning_rates)}: give at least one positive rate.")
    output_dir = Path(output_dir)
    score = score or (lambda m: score_arithmetic(m, validation_pairs))
    probe = model_factory()
    components = {m: mode_components(probe, m, key, head_ranking, seed) for m in modes}
    precise_key = KeyComponents(model=key.model, heads=key.heads, selection=None)
    budget = head_slices(probe, precise_key, kv_policy=config.kv_policy, include_mlps=False).n_tuned
    lora_rank, per_rank = lora_rank_for_budget(probe, budget) if Mode("lora") in modes else (config.lora_rank, 0)
    del probe
    runs: list[SweepRun] = []
    for mode in modes:
        for lr in [math.nan] if mode.kind == "base" else list(learning_rates):
            run_dir = output_dir / str(mode) / ("base" if mode.kind == "base" else f"lr_{lr:g}")
            record = run_dir / "sweep_run.json"
            if record.exists():
                runs.append(SweepRun.load(record))
                continue
            model = model_factory()
            if mode.method is None:  # base: not trained
                trained, n_trainable, step, loss, rt, sps = model.eval(), 0, 0, math.nan, 0.0, math.nan
            else:
                cfg = dataclasses.replace(
                    config,
                    mode=mode.method,
                    learning_rate=lr,
                    include_mlps=True,
                    lora_rank=lora_rank,
                    save_final=True,
                )
                trained, result = train_sft(
                    model, tokenizer, train_dataset, run_dir, key=components[mode], config=cfg, model_name=model_name
                )
                n_trainable, step, loss = result.n_trainable, result.global_step, result.train_loss
                rt, sps = result.runtime_s, result.samples_per_second
            correct = tuple(int(c) for c in score(trained))
            run = SweepRun(mode, float(lr), correct, int(n_trainable), int(step), float(loss), rt, sps, str(run_dir))
            run.save(record)
            runs.append(run)
            del model, trained
    selected = {str(m): _select([r for r in runs if r.mode == m]) for m in modes if m.kind != "base"}
    comparison = SFTComparison(
        modes=modes,
        learning_rates=tuple(float(x) for x in learning_rates),
        runs=tuple(runs),
        selected=selected,
        settings=CompareSettings(
            max_steps=config.max_steps,
            epochs=config.epochs,
            batch_size=config.batch_size,
            train_seed=config.seed,
            random_heads_seed=seed,
            n_train=len(train_dataset),
            n_validation=len(validation_pairs),
            precise_budget=int(budget),
            lora_rank=int(lora_rank),
            lora_params_per_rank=int(per_rank),
            components={
                str(m): [list(h) for h in c.heads] + [["mlp", x] for x in c.mlps] for m, c in components.items() if c
            },
        ),
    )
    comparison.save(output_dir / "comparison.json")
    return comparison


def load_tuned(model_factory: Callable[[], nn.Module], run: SweepRun) -> nn.Module:
    """Rebuild the trained model of one run from its folder (merged into a plain HF model, eval mode).

    Args:
        model_factory: returns a fresh copy of the base HF model.
        run: a run of an :class:`SFTComparison`.

    Returns:
        The tuned HF model (the base model for ``base``).
    """
    final = Path(run.output_dir) / "final"
    if run.mode.kind != "base" and not final.exists():
        raise FileNotFoundError(f"{final} is missing. Fix: re-run the comparison (the run folder was removed).")
    base = model_factory()
    if run.mode.kind == "base":
        return base.eval()
    if run.mode.kind == "full":
        from transformers import AutoModelForCausalLM

        dtype = next(base.parameters()).dtype
        device = next(base.parameters()).device
        return AutoModelForCausalLM.from_pretrained(str(final), dtype=dtype).to(device).eval()
    if run.mode.kind == "lora":
        from peft import PeftModel

        return PeftModel.from_pretrained(base, str(final)).merge_and_unload().eval()
    return HeadSliceAdapter.from_pretrained(base, final).merge_and_unload().eval()
