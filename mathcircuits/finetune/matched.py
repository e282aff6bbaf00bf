"""The random-heads control of precise SFT, matched in depth and parameters; and what shared K/V changes.

Background. Wang & Veitch (2025) find that tuning *random* attention heads, each at its own best
learning rate, does nearly as well as tuning "localised" ones. A fair control for precise SFT is
therefore a random head set that differs from the key heads only in *which* heads, not in how
deep they sit or how many parameters they train: otherwise a difference could come from depth
(later layers are closer to the logits) or from capacity.

Method. For every layer ``l`` with ``k_l`` key heads, draw ``k_l`` non-key heads of layer ``l``
(depth-matched, layer by layer). Under grouped-query attention a head's K/V slice belongs to its
KV group, so the parameter count is ``n_heads · (q + o rows) + n_groups · (k + v rows)``; a draw
is kept only when it tunes as many KV groups in layer ``l`` as the key heads do under the same
``kv_policy`` (parameter-matched, exactly). Heads outside the key heads' KV groups are preferred, so
the control does not tune the key heads' own K/V; when a layer has too few of them, every non-key
head of the layer is allowed. Draws are rejection-sampled (seeded); a layer where no draw matches
after ``max_tries`` keeps the closest one, and the result says so (``exact``).

:func:`kv_shared_heads` names the side effect of ``kv_policy="group"``: the non-key heads whose
keys and values change because they share a KV group with a key head (two per key head on
SmolLM2, which has 3 query heads per KV head). ``"exclusive"`` tunes a group's K/V only when all
its heads are key heads, so no non-key head changes.

Usage::

    draw = matched_random_heads(model_facts(model), key.heads, kv_policy="group", seed=1)
    draw.heads, draw.exact              # ((13, 4), (14, 6), ...), True
    kv_shared_heads(head_slices(model, key))   # ((14, 0), (14, 2), ...)

References: Wang & Veitch, "Does Editing Provide Evidence for Localization?" (arXiv 2502.11447, 2025):
optimal edits at random heads can be as effective as at localised ones; Zhang et al., ICML 2024, §5.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from mathcircuits._errors import FixableValueError
from mathcircuits.finetune.layouts import KVPolicy, kv_groups
from mathcircuits.finetune.sliceset import SliceSet
from mathcircuits.models import Head, ModelSpec

__all__ = ["MatchedDraw", "kv_shared_heads", "matched_random_heads"]


@dataclass(frozen=True)
class MatchedDraw:
    """One depth- and parameter-matched random head set.

    Args:
        heads: the drawn ``(layer, head)`` pairs, sorted; as many per layer as the key heads.
        kv_groups: the ``(layer, group)`` pairs whose K/V they tune under the policy of the draw.
        exact: every layer tunes as many KV groups as the key heads (so the parameter count is equal).
        outside_key_groups: no drawn head shares a KV group with a key head.
        seed: the draw's seed.
    """

    heads: tuple[Head, ...]
    kv_groups: tuple[tuple[int, int], ...]
    exact: bool
    outside_key_groups: bool
    seed: int


def matched_random_heads(
    facts: ModelSpec,
    key_heads: Sequence[tuple[int, int]],
    kv_policy: KVPolicy = "group",
    seed: int = 0,
    max_tries: int = 2000,
) -> MatchedDraw:
    """Random non-key heads with the key heads' count per layer and KV-group count per layer.

    Args:
        facts: :func:`~mathcircuits.finetune.model_facts` of the model (its ``n_layers``, ``n_heads``, ``n_kv_heads``).
        key_heads: the key heads.
        kv_policy: ``"group"``, ``"exclusive"`` or ``"frozen"`` (as the precise run it controls for).
        seed: seed of the draw.
        max_tries: rejection-sampling attempts per layer before the closest draw is kept.

    Returns:
        The :class:`MatchedDraw`.

    Raises:
        ValueError: a key head is out of range, or a layer has fewer non-key heads than key heads.
    """
    n_layers, n_heads = facts.n_layers, facts.n_heads
    size = facts.group_size
    key = sorted({(int(l), int(h)) for l, h in key_heads})
    bad = [h for h in key if not (0 <= h[0] < n_layers and 0 <= h[1] < n_heads)]
    if bad:
        raise ValueError(f"key heads {bad} are outside a model of {n_layers} layers × {n_heads} heads.")
    rng = random.Random(seed)
    heads: list[Head] = []
    exact = outside = True
    for layer in sorted({l for l, _ in key}):
        mine = [h for l, h in key if l == layer]
        target = len(kv_groups([Head(layer, h) for h in mine], facts, kv_policy))
        free = [h for h in range(n_heads) if h not in mine]
        if len(free) < len(mine):
            raise FixableValueError(
                f"layer {layer} has {len(mine)} key heads but only {len(free)} other heads to draw from. ",
                "tune fewer key heads, or use the uniform random control (random_heads).",
            )
        key_groups = {h // size for h in mine}
        away = [h for h in free if h // size not in key_groups]
        pools = [away, free] if len(away) >= len(mine) else [free]
        best: tuple[int, list[int], bool] | None = None
        for pool in pools:
            for _ in range(max_tries):
                pick = sorted(rng.sample(pool, len(mine)))
                miss = abs(len(kv_groups([Head(layer, h) for h in pick], facts, kv_policy)) - target)
                if best is None or miss < best[0]:
                    best = (miss, pick, pool is away)
                if miss == 0:
                    break
            if best is not None and best[0] == 0:
                break
        assert best is not None
        exact &= best[0] == 0
        outside &= best[2]
        heads += [Head(layer, h) for h in best[1]]
    heads.sort()
    groups = kv_groups(heads, facts, kv_policy)
    return MatchedDraw(tuple(heads), tuple(groups), exact, outside, seed)


def kv_shared_heads(slices: SliceSet) -> tuple[Head, ...]:
    """The non-tuned heads whose keys and values change because their KV group's K/V slice is tuned.

    Args:
        slices: the :class:`SliceSet` of a precise run (its heads, its ``kv_groups`` and the model's shape).

    Returns:
        Sorted heads; empty without GQA, under ``kv_policy="exclusive"`` or ``"frozen"``.
    """
    size = slices.model.group_size
    tuned = set(slices.heads)
    return tuple(
        sorted(
            Head(l, g * size + i) for l, g in slices.kv_groups for i in range(size) if (l, g * size + i) not in tuned
        )
    )
