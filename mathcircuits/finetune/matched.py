"""The random-heads control of precise SFT, matched in depth and parameters; and what shared K/V changes.

Wang & Veitch (2025) find that tuning *random* attention heads, each at its own best learning rate, does nearly as
well as tuning "localised" ones. A fair control differs from the key heads only in *which* heads, not in depth
(later layers are closer to the logits) or capacity.

Method. For every layer ``l`` with ``k_l`` key heads, draw ``k_l`` non-key heads of layer ``l``. Under GQA a
head's K/V slice belongs to its KV group, so the parameter count is ``n_heads · (q + o rows) + n_groups · (k + v
rows)``; a draw is kept only when it tunes as many KV groups in layer ``l`` as the key heads do under the same
``kv_policy`` (exactly parameter-matched). Heads outside the key heads' KV groups are preferred, so the control
does not tune the key heads' own K/V; a layer with too few of them allows every non-key head. Draws are
rejection-sampled (seeded); a layer with no match after ``max_tries`` keeps the closest draw (``exact`` False).

Under ``kv_policy="group"`` the non-key heads sharing a KV group with a key head have their keys and values
changed too (two per key head on SmolLM2, 3 query heads per KV head); ``"exclusive"`` tunes a group's K/V only
when all its heads are key heads.


References: Wang & Veitch, "Does Editing Provide Evidence for Localization?" (arXiv 2502.11447, 2025);
Zhang et al., ICML 2024, §5.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from mathcircuits._errors import FixableValueError
from mathcircuits.finetune.layouts import KVPolicy, kv_groups
from mathcircuits.finetune.sliceset import SliceSet
from mathcircuits.models import Head, ModelSpec

__all__: list[str] = []


@dataclass(frozen=True)
class MatchedDraw:
    """One depth- and parameter-matched random head set.

    ``exact``: every layer tunes as many KV groups as the key heads (equal parameter count);
    ``outside_key_groups``: no drawn head shares a KV group with a key head.
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

    ``kv_policy`` should be the precise run's it controls for. Refuses a layer with fewer non-key heads than key heads.
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

    Empty without GQA and under ``kv_policy="exclusive"`` or ``"frozen"``.
    """
    size = slices.model.group_size
    tuned = set(slices.heads)
    return tuple(
        sorted(
            Head(l, g * size + i) for l, g in slices.kv_groups for i in range(size) if (l, g * size + i) not in tuned
        )
    )
