"""What each fine-tuning mode tunes, and the budgets that make the modes comparable."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mathcircuits._errors import FixableValueError
from mathcircuits.finetune.layouts import model_facts
from mathcircuits.finetune.methods import lora_targets
from mathcircuits.finetune.modes import Mode
from mathcircuits.models import Head
from mathcircuits.patching import KeyComponents, SelectionSource

__all__: list[str] = []


def random_heads(
    n_layers: int, n_heads: int, count: int, exclude: Sequence[tuple[int, int]] = (), seed: int = 0
) -> tuple[Head, ...]:
    """``count`` heads drawn uniformly without replacement from those not in ``exclude`` (seeded), sorted."""
    pool = [Head(layer, h) for layer in range(n_layers) for h in range(n_heads) if (layer, h) not in set(exclude)]
    if count > len(pool):
        raise FixableValueError(f"cannot draw {count} random heads from the {len(pool)} non-key heads. ", "tune fewer.")
    order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))[:count]
    return tuple(sorted(pool[i] for i in order.tolist()))


def mode_components(
    model: nn.Module,
    mode: Mode | str,
    key: KeyComponents,
    head_ranking: Sequence[tuple[int, int]] = (),
    seed: int = 0,
) -> KeyComponents | None:
    """The components a head mode tunes (None for ``base``, ``lora`` and ``full``).

    ``head_ranking`` lists every head, best first, for ``precise@K``. The components are chosen by no rule
    (``selection`` is None, ``source.note`` names the mode); MLPs only for the ``+mlp`` modes.
    """
    mode = Mode.parse(mode)
    if mode.kind in ("base", "lora", "full"):
        return None
    facts = model_facts(model)
    if mode.kind == "random":
        heads = random_heads(facts.n_layers, facts.n_heads, len(key.heads), key.heads, seed)
        return KeyComponents(
            model=key.model, heads=heads, selection=None, source=SelectionSource(note=f"random heads, seed {seed}")
        )
    if mode.top_k is not None:
        if len(head_ranking) < mode.top_k:
            raise FixableValueError(
                f"mode {str(mode)!r} needs a ranking of at least {mode.top_k} heads, got {len(head_ranking)}. ",
                "pass head_ranking (every head by path-patching effect).",
            )
        heads = tuple(Head.of(h) for h in head_ranking[: mode.top_k])
    else:
        heads = key.heads
    return KeyComponents(
        model=key.model,
        heads=heads,
        mlps=key.mlps if mode.mlps else (),
        selection=None,
        source=SelectionSource(note=f"mode {mode}"),
    )


def lora_rank_for_budget(model: nn.Module, budget: int) -> tuple[int, int]:
    """The LoRA rank on the attention projections whose parameter count is nearest to ``budget``.

    A rank-``r`` LoRA of an ``[out, in]`` weight has ``r·(in + out)`` parameters, so the nearest rank (at least 1) is
    within half of one rank's worth of ``budget`` (unless ``budget`` is below half a rank). Returns
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
