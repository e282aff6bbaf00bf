"""Train and score one unit of a fine-tuning comparison (:mod:`mathcircuits.finetune.units`).

What ``precise`` tunes (one definition, shared by every table and claim): each key head's q rows and o columns
and, under GQA, its KV group's k and v rows (``kv_policy="group"`` also changes the group's other heads' keys and
values, listed as :attr:`~mathcircuits.finetune.units.UnitRecord.kv_shared_heads`; ``"exclusive"``: only groups
whose heads are all key heads). ``+mlp`` tunes the key MLPs whole (on SmolLM2 most of its parameters). ``random``
draws its matched heads with the unit's seed; ``lora``'s rank matches ``precise``'s parameter count.

The trained model is merged into a plain HF model, scored and dropped: a unit keeps its scores, not its weights.
CPU time is the process's (``time.process_time``), split into training and scoring.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from mathcircuits._errors import FixableValueError
from mathcircuits.finetune.adapter import HeadSliceAdapter
from mathcircuits.finetune.components import lora_rank_for_budget
from mathcircuits.finetune.config import SFTConfig
from mathcircuits.finetune.layouts import model_facts
from mathcircuits.finetune.matched import kv_shared_heads, matched_random_heads
from mathcircuits.finetune.sft import train_sft
from mathcircuits.finetune.slices import head_slices
from mathcircuits.finetune.units import ItemScores, Unit, UnitRecord
from mathcircuits.models import Head
from mathcircuits.patching import KeyComponents, SelectionSource

__all__ = [
    "Scorers",
]


@dataclass(frozen=True)
class Scorers:
    """How a unit's model is scored.

    ``math``: ``(model, split) → ItemScores`` on that split's held-out arithmetic facts; ``generic``:
    ``(model, n) → benchmark → ItemScores`` on the first ``n`` items of each (None: every item); ``sweep_generic``:
    ``n`` for sweep units (0: no generic scoring in the sweep).
    """

    math: Callable[[nn.Module, str], ItemScores]
    generic: Callable[[nn.Module, int | None], dict[str, ItemScores]]
    sweep_generic: int = 0


def unit_components(
    model: nn.Module, unit: Unit, key: KeyComponents, ranking: Sequence[tuple[int, int]] = ()
) -> KeyComponents | None:
    """The heads (and MLPs) a head mode tunes; None for ``base``, ``lora`` and ``full``.

    ``ranking`` lists every head, best first, for ``precise@K``; ``random`` gets a matched draw.
    """
    mode = unit.mode
    if mode.kind in ("base", "lora", "full"):
        return None
    if mode.kind == "random":
        draw = matched_random_heads(model_facts(model, key.model.name), key.heads, unit.kv_policy, seed=unit.seed)
        note = f"matched random heads, seed {unit.seed}"
        return KeyComponents(model=key.model, heads=draw.heads, selection=None, source=SelectionSource(note=note))
    mlps = key.mlps if mode.mlps else ()
    heads = key.heads
    if mode.top_k is not None:
        if len(ranking) < mode.top_k:
            raise FixableValueError(
                f"mode {str(unit.mode)!r} needs a ranking of at least {mode.top_k} heads, got {len(ranking)}. ",
                "pass ranking (every head by path-patching effect).",
            )
        heads = tuple(Head.of(h) for h in ranking[: mode.top_k])
    return KeyComponents(
        model=key.model, heads=heads, mlps=mlps, selection=None, source=SelectionSource(note=f"mode {mode}")
    )


def execute_unit(
    unit: Unit,
    work: Path,
    *,
    factory: Callable[[], nn.Module],
    tokenizer: Any,
    train_dataset: Any,
    key: KeyComponents,
    config: SFTConfig,
    scorers: Scorers,
    model_name: str | None = None,
    ranking: Sequence[tuple[int, int]] = (),
) -> UnitRecord:
    """Train ``unit`` (in ``work``), score the merged model, and return its record (the caller saves it).

    ``work`` is scratch (no checkpoints or final weights are written); ``factory`` returns a fresh copy of the base
    model; ``config`` holds the shared settings (batch, schedule, decay): mode, rate, seed, steps, kv policy and MLPs
    come from the unit. ``model_name`` checks ``key``; ``ranking`` lists every head, best first, for ``precise@K``.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    model = factory()
    comps = unit_components(model, unit, key, ranking)
    heads: tuple[Head, ...] = comps.heads if comps is not None else ()
    mlps: tuple[int, ...] = comps.mlps if comps is not None else ()
    shared: tuple[Head, ...] = ()
    n_trainable, step, loss, rank = 0, 0, math.nan, 0
    method = unit.mode.method
    if method is not None:  # base is not trained
        if method == "lora":
            precise = KeyComponents(model=key.model, heads=key.heads, selection=None)
            budget = head_slices(model, precise, kv_policy="group").n_tuned
            rank = lora_rank_for_budget(model, budget)[0]
        cfg = dataclasses.replace(
            config,
            mode=method,
            learning_rate=unit.learning_rate,
            seed=unit.seed,
            max_steps=unit.steps,
            kv_policy=unit.kv_policy,
            include_mlps=bool(mlps),
            lora_rank=rank or config.lora_rank,
            save_final=False,
            save_steps=0,
        )
        work.mkdir(parents=True, exist_ok=True)
        trained, result = train_sft(model, tokenizer, train_dataset, work, key=comps, config=cfg, model_name=model_name)
        if isinstance(trained, HeadSliceAdapter):
            shared = kv_shared_heads(trained.slices)
            model = trained.merge_and_unload()
        elif method == "lora":
            model = trained.merge_and_unload()
        else:
            model = trained
        n_trainable, step, loss = result.n_trainable, result.global_step, result.train_loss
    model.eval()
    c1 = time.process_time()
    splits = ("validation", "test") if unit.phase == "base" else ("validation",) if unit.phase == "sweep" else ("test",)
    math_scores = {s: scorers.math(model, s) for s in splits}
    n_generic = scorers.sweep_generic if unit.phase == "sweep" else None
    generic = scorers.generic(model, n_generic) if n_generic != 0 else {}
    c2 = time.process_time()
    return UnitRecord(
        unit=unit,
        heads=heads,
        mlps=tuple(mlps),
        kv_shared_heads=shared,
        n_trainable=int(n_trainable),
        global_step=int(step),
        train_loss=float(loss),
        train_cpu_s=c1 - c0,
        eval_cpu_s=c2 - c1,
        wall_s=time.perf_counter() - t0,
        math=math_scores,
        generic=generic,
        lora_rank=rank,
    )
