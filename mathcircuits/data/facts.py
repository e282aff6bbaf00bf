"""Arithmetic facts: the ``(operation, a, b)`` behind a prompt, and splits that share no fact.

A held-out test of fine-tuning must not hold a fact the model was trained on. The templates render one
fact in many wordings (``"3 + 5 ="``, ``"The sum of 3 and 5 is"``), so a held-out set deduplicated by
prompt string still holds facts trained in another wording (about 27% of the addition
and 46% of the subtraction test items of the default run). The unit of a split is therefore the fact.

The fact space is every operand pair the answer rules allow (:func:`~mathcircuits.data.generate.operand_pairs`).
A seeded permutation of each operation's facts is cut into consecutive parts by the given shares, so every
part has the operations in the same proportions and no two parts share a fact.

Usage::

    parts = split_facts(cfg, {"train": 0.5, "validation": 0.2, "test": 0.3}, seed=0)
    test = generate_pairs(tok, templates, cfg, facts=parts["test"])
    heldout = drop_facts(heldout, facts_of(train))
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping

from mathcircuits._errors import FixableValueError
from mathcircuits.data.generate import GenerationConfig, operand_pairs
from mathcircuits.data.pairs import PairRow
from mathcircuits.data.pairset import PairSet

__all__ = [
    "drop_facts",
]

Fact = tuple[str, int, int]
"""An arithmetic fact: ``(operation, a, b)``."""


def fact_of(row: PairRow) -> Fact:
    """The fact of one pair (a row of :func:`~mathcircuits.data.generate_pairs`)."""
    return (str(row["operation"]), int(row["a"]), int(row["b"]))


def facts_of(pairs: PairSet) -> frozenset[Fact]:
    """Every fact of a pair set (with ``operation``, ``a`` and ``b``)."""
    _check(pairs)
    return frozenset(zip(pairs.operations, pairs.a, pairs.b))


def drop_facts(pairs: PairSet, facts: Collection[Fact]) -> PairSet:
    """The pairs whose fact is not in ``facts`` (e.g. a held-out set without any trained fact)."""
    _check(pairs)
    seen = facts if isinstance(facts, (set, frozenset)) else set(facts)
    return pairs.where([f not in seen for f in zip(pairs.operations, pairs.a, pairs.b)])


def split_facts(config: GenerationConfig, shares: Mapping[str, float], seed: int = 0) -> dict[str, frozenset[Fact]]:
    """Cut the fact space of ``config`` into disjoint parts, each operation in the same proportions.

    ``shares``: part name → share of each operation's facts, e.g. ``{"train": 0.5, "test": 0.3}``; positive,
    summing to at most 1 (the rest is left out). ValueError when a part would be empty.
    """
    if not shares or any(not s > 0 for s in shares.values()) or sum(shares.values()) > 1 + 1e-9:
        raise FixableValueError(
            f"split_facts got shares {dict(shares)}. ",
            "give positive shares that sum to at most 1, e.g. {'train': 0.5, 'validation': 0.2, 'test': 0.3}.",
        )
    rng = random.Random(seed)
    parts: dict[str, set[Fact]] = {name: set() for name in shares}
    for op in config.operations:
        facts = [(op, a, b) for a, b, _ in operand_pairs(op, config)]
        rng.shuffle(facts)
        start = 0
        for name, share in shares.items():
            stop = start + int(round(share * len(facts)))
            parts[name].update(facts[start:stop])
            start = stop
    empty = [name for name, part in parts.items() if not part]
    if empty:
        raise FixableValueError(
            f"split_facts: parts {empty} get no fact from operand_range {list(config.operand_range)}. ",
            "widen the operand range or raise their shares.",
        )
    return {name: frozenset(part) for name, part in parts.items()}


def _check(pairs: PairSet) -> None:
    missing = [c for c in ("operation", "a", "b") if not pairs.has(c)]
    if missing:
        raise FixableValueError(
            f"a pair set without the columns {missing} has no facts. ",
            "pass pairs built by mathcircuits.data.generate_pairs.",
        )
