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

Modes (:data:`MODE_PATTERN`):

* ``base`` — no training (the reference row);
* ``precise`` — the key heads (q/k/v/o slices, see :mod:`~mathcircuits.finetune.slices`);
* ``precise+mlp`` — the key heads and the key MLPs;
* ``precise@K`` / ``precise@K+mlp`` — the top-K heads of a ranking by path-patching effect (Table 2);
* ``random`` — as many heads as ``precise``, drawn uniformly (seeded) from the non-key heads: the
  control the paper lacks;
* ``lora`` — PEFT LoRA on every attention projection with the rank whose parameter count is nearest
  to ``precise``'s (:func:`lora_rank_for_budget`; it is within half of one rank's parameters);
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
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import pandas as pd
import torch
from torch import nn

from mathcircuits._io import SavedResult
from mathcircuits._schema import ConfigError, check_fields, setting
from mathcircuits.data import score_pairs
from mathcircuits.finetune.adapter import HeadSliceAdapter
from mathcircuits.finetune.layouts import model_facts
from mathcircuits.finetune.slices import head_slices
from mathcircuits.finetune.train import SFTConfig, lora_targets, train_sft
from mathcircuits.models.prefix import HFForward, PrefixRunner
from mathcircuits.patching.selection import KeyComponents

__all__ = [
    "MODE_PATTERN",
    "CompareConfig",
    "SFTComparison",
    "SweepRun",
    "check_modes",
    "compare_sft",
    "load_tuned",
    "lora_rank_for_budget",
    "mode_components",
    "random_heads",
    "score_arithmetic",
    "split_validation",
]

MODE_PATTERN = re.compile(r"^(base|precise|precise\+mlp|precise@[1-9][0-9]*(\+mlp)?|random|lora|full)$")


@dataclass(frozen=True)
class CompareConfig:
    """What the comparison sweeps (the shared training settings are an :class:`SFTConfig`).

    Args:
        enabled: run the ``compare`` stage.
        modes: the modes compared (:data:`MODE_PATTERN`); ``base`` is the reference row.
        learning_rates: the sweep, the same for every trained mode.
        validation_pairs: arithmetic pairs the rate is selected on (disjoint from training and test).
        random_seed: seed of the ``random`` heads.
    """

    enabled: bool = setting(False, "run the compare stage (a learning-rate sweep per mode: slow)")
    modes: tuple[str, ...] = setting(
        ("base", "precise", "precise+mlp", "precise@4", "precise@8", "random", "lora", "full"),
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


def mode_components(
    model: nn.Module,
    mode: str,
    key: KeyComponents,
    head_ranking: Sequence[tuple[int, int]] = (),
    seed: int = 0,
) -> KeyComponents | None:
    """The components a head mode tunes (None for ``base``, ``lora`` and ``full``).

    Args:
        model: the HF model (for its shape).
        mode: a mode name (see :data:`MODE_PATTERN`).
        key: the selected key components (heads and MLPs).
        head_ranking: every head, best first, for ``precise@K`` (e.g. by path-patching effect).
        seed: seed of the ``random`` draw.

    Returns:
        The components; MLPs only for the ``+mlp`` modes.
    """
    if mode in ("base", "lora", "full"):
        return None
    facts = model_facts(model)
    if mode == "random":
        heads = random_heads(facts["n_layers"], facts["n_heads"], len(key.heads), key.heads, seed)
        return KeyComponents(model=key.model, heads=heads, rule="random", rule_params={"seed": seed})
    with_mlps = mode.endswith("+mlp")
    if mode.startswith("precise@"):
        k = int(mode.split("@", 1)[1].removesuffix("+mlp"))
        if len(head_ranking) < k:
            raise ValueError(
                f"mode {mode!r} needs a ranking of at least {k} heads, got {len(head_ranking)}. "
                "Fix: pass head_ranking (every head by path-patching effect)."
            )
        heads = tuple(tuple(h) for h in head_ranking[:k])
    else:
        heads = key.heads
    return KeyComponents(
        model=key.model, heads=heads, mlps=key.mlps if with_mlps else (), rule="topk", rule_params={"mode": mode}
    )


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


def split_validation(
    pool: datasets.Dataset, test: datasets.Dataset, n_validation: int, seed: int = 0
) -> datasets.Dataset:
    """A validation split drawn from ``pool``, without any prompt that is also a test prompt.

    Args:
        pool: candidate pairs (generated apart from training, and already without training prompts).
        test: the held-out test pairs (their ``prompt`` column).
        n_validation: how many pairs to keep (fewer when the pool is smaller).
        seed: seed of the draw.

    Returns:
        The validation pairs.
    """
    seen = set(test["prompt"])
    kept = pool.filter(lambda r: r["prompt"] not in seen).shuffle(seed=seed)
    return kept.select(range(min(n_validation, len(kept))))


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


@dataclass(frozen=True)
class SweepRun(SavedResult):
    """One (mode, learning rate) run of the sweep and its validation outcome.

    ``learning_rate`` is NaN for ``base``; ``output_dir`` holds the run's ``final`` model or adapter.
    """

    STAGE = "compare"

    mode: str
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


@dataclass(frozen=True)
class SFTComparison(SavedResult):
    """The whole sweep, and per mode the selected learning rate (best validation accuracy).

    ``settings`` records the shared training settings (steps, batch, seed, data sizes).
    """

    STAGE = "compare"

    modes: tuple[str, ...]
    learning_rates: tuple[float, ...]
    runs: tuple[SweepRun, ...]
    selected: dict[str, float]
    settings: dict[str, Any] = field(default_factory=dict)

    def run(self, mode: str) -> SweepRun:
        """The selected run of ``mode`` (its best rate on validation; the only run of ``base``)."""
        for r in self.runs:
            if r.mode == mode and (mode == "base" or r.learning_rate == self.selected[mode]):
                return r
        raise KeyError(f"no run of mode {mode!r}; the comparison has {list(self.modes)}.")

    def to_dataframe(self) -> pd.DataFrame:
        """One row per run: mode, learning rate, validation accuracy and n, selected, tuned params, steps, loss."""
        rows = []
        for r in self.runs:
            rows.append(
                {
                    "mode": r.mode,
                    "learning_rate": r.learning_rate,
                    "val_accuracy": r.val_accuracy,
                    "val_n": len(r.val_correct),
                    "selected": r.mode == "base" or self.selected.get(r.mode) == r.learning_rate,
                    "n_trainable": r.n_trainable,
                    "global_step": r.global_step,
                    "train_loss": r.train_loss,
                    "samples_per_second": r.samples_per_second,
                }
            )
        return pd.DataFrame(rows)


def _select(runs: Sequence[SweepRun]) -> float:
    best = max(r.val_accuracy for r in runs)
    return min(r.learning_rate for r in runs if r.val_accuracy == best)  # ties: the smallest rate


def compare_sft(
    model_factory: Callable[[], nn.Module],
    tokenizer: Any,
    train_dataset: datasets.Dataset,
    validation_pairs: datasets.Dataset,
    key: KeyComponents,
    output_dir: str | Path,
    modes: Sequence[str] = ("base", "precise", "precise+mlp", "random", "lora", "full"),
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
        modes: which modes (:data:`MODE_PATTERN`).
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
    precise_key = KeyComponents(model=key.model, heads=key.heads)
    budget = head_slices(probe, precise_key, kv_policy=config.kv_policy, include_mlps=False).n_tuned
    lora_rank, per_rank = lora_rank_for_budget(probe, budget) if "lora" in modes else (config.lora_rank, 0)
    del probe
    runs: list[SweepRun] = []
    for mode in modes:
        for lr in [math.nan] if mode == "base" else list(learning_rates):
            run_dir = output_dir / mode / ("base" if mode == "base" else f"lr_{lr:g}")
            record = run_dir / "sweep_run.json"
            if record.exists():
                runs.append(SweepRun.load(record))
                continue
            model = model_factory()
            if mode == "base":
                trained, n_trainable, step, loss, rt, sps = model.eval(), 0, 0, math.nan, 0.0, math.nan
            else:
                cfg = dataclasses.replace(
                    config,
                    mode="full" if mode == "full" else "lora" if mode == "lora" else "precise",
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
    selected = {m: _select([r for r in runs if r.mode == m]) for m in modes if m != "base"}
    comparison = SFTComparison(
        modes=modes,
        learning_rates=tuple(float(x) for x in learning_rates),
        runs=tuple(runs),
        selected=selected,
        settings={
            "max_steps": config.max_steps,
            "epochs": config.epochs,
            "batch_size": config.batch_size,
            "train_seed": config.seed,
            "random_heads_seed": seed,
            "n_train": len(train_dataset),
            "n_validation": len(validation_pairs),
            "precise_budget": int(budget),
            "lora_rank": int(lora_rank),
            "lora_params_per_rank": int(per_rank),
            "components": {
                m: [list(h) for h in c.heads] + [["mlp", x] for x in c.mlps] for m, c in components.items() if c
            },
        },
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
    if run.mode != "base" and not final.exists():
        raise FileNotFoundError(f"{final} is missing. Fix: re-run the comparison (the run folder was removed).")
    base = model_factory()
    if run.mode == "base":
        return base.eval()
    if run.mode == "full":
        from transformers import AutoModelForCausalLM

        dtype = next(base.parameters()).dtype
        device = next(base.parameters()).device
        return AutoModelForCausalLM.from_pretrained(str(final), dtype=dtype).to(device).eval()
    if run.mode == "lora":
        from peft import PeftModel

        return PeftModel.from_pretrained(base, str(final)).merge_and_unload().eval()
    return HeadSliceAdapter.from_pretrained(base, final).merge_and_unload().eval()
