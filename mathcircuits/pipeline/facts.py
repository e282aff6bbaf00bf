"""Facts kept apart by stage: identify, validate, analyze and circuit draw from disjoint ``(op, a, b)`` facts.

Why. Rows that differ can still hold the same fact in another wording (``"3 + 5 ="`` and ``"The sum of 3 and
5 is"``): before this partition the fresh pairs of validate shared a fact with identify's pairs in 9–19 of 32
cases per operation. A knockout scored on facts that chose the heads is not a fresh test.

Method. The fact space is cut once, seeded by ``data.seed``, into one part per stage of :data:`FACT_STAGES`
in the shares ``data.stage_fact_shares`` (:func:`~mathcircuits.data.facts.split_facts`). The data stage tags every
pair with the stage that owns its fact (column ``fact_stage``); a stage draws only its own rows, and the
circuit stage, which generates its own pairs, draws from its part. Each stage counts the facts it used and
how many of them any other stage used or owns (:func:`fact_use`): 0, written in its summary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, get_args

from mathcircuits._errors import FixableValueError
from mathcircuits.data import GenerationConfig, PairSet
from mathcircuits.data.facts import Fact, facts_of, split_facts

__all__ = [
    "FactUse",
]

#: The stages that draw pairs, each from its own part of the facts, in the order of ``data.stage_fact_shares``.
FactStage: TypeAlias = Literal["identify", "validate", "analyze", "circuit"]
FACT_STAGES: tuple[FactStage, ...] = get_args(FactStage)
#: The partition's seed is ``data.seed`` plus this: with ``data.seed`` itself, its permutation of the facts is
#: the reverse of the data stage's operand order (``random.shuffle`` and ``random.sample`` draw the same stream),
#: so a template's first draws would all be the last stage's facts.
PARTITION_SEED_OFFSET = 104_729


def stage_facts(data: GenerationConfig, shares: tuple[float, ...]) -> dict[FactStage, frozenset[Fact]]:
    """The declared partition: each stage's facts, disjoint, seeded by ``data.seed``.

    ``shares``: each stage's share of every operation's facts, in the order of :data:`FACT_STAGES` (see also
    :data:`PARTITION_SEED_OFFSET`).
    """
    if len(shares) != len(FACT_STAGES):
        raise FixableValueError(
            f"data.stage_fact_shares has {len(shares)} shares for the {len(FACT_STAGES)} stages {FACT_STAGES}. ",
            "give one share per stage, e.g. [0.35, 0.35, 0.1, 0.2].",
        )
    parts = split_facts(data, dict(zip(FACT_STAGES, shares)), seed=data.seed + PARTITION_SEED_OFFSET)
    return parts  # type: ignore[return-value]


def tag_fact_stages(pairs: PairSet, parts: Mapping[FactStage, frozenset[Fact]]) -> PairSet:
    """The pairs with a column ``fact_stage``: the stage whose part holds each pair's fact (``""``: none)."""
    owner = {f: s for s, part in parts.items() for f in part}
    return pairs.with_fact_stages([owner.get(f, "") for f in zip(pairs.operations, pairs.a, pairs.b)])


def stage_rows(pairs: PairSet, stage: FactStage) -> PairSet:
    """The rows whose fact belongs to ``stage``: all a stage may draw from (never another stage's facts).

    Fewer than a stage asks for when its share holds fewer: a cap, never a borrow from another stage.
    """
    if stage not in FACT_STAGES:
        raise FixableValueError(f"stage {stage!r} owns no facts. ", f"use one of {FACT_STAGES}.")
    if not pairs.has("fact_stage"):
        raise FixableValueError(
            "these pairs have no fact_stage column, so the stage's facts cannot be kept apart. ",
            "re-run the data stage (mathcircuits data --force) with this version.",
        )
    return pairs.where([s == stage for s in pairs.fact_stages])


@dataclass(frozen=True)
class FactUse:
    """The facts one stage used, per operation, and how many of them another stage used or owns (must be 0).

    ``overlap`` maps each other stage to the facts shared with it: with the facts it really used where known
    (identify's patched pairs), else with its declared part.
    """

    facts: dict[str, int] = field(default_factory=dict)
    overlap: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        """One summary line: ``facts used: add 20, sub 14; shared with identify 0, validate 0, ...``."""
        used = ", ".join(f"{op} {n}" for op, n in self.facts.items()) or "none"
        shared = ", ".join(f"{s} {n}" for s, n in self.overlap.items())
        return f"  facts (op, a, b) used: {used}; shared with {shared}"


def fact_use(
    stage: FactStage,
    used: PairSet | frozenset[Fact],
    parts: Mapping[FactStage, frozenset[Fact]],
    others_used: Mapping[FactStage, frozenset[Fact]] | None = None,
) -> FactUse:
    """Count the facts ``stage`` used and their overlap with every other stage.

    ``others_used``: facts other stages really used, compared instead of their declared part.
    """
    facts = used if isinstance(used, frozenset) else facts_of(used) if len(used) else frozenset()
    per_op: dict[str, int] = {}
    for op, _, _ in sorted(facts):
        per_op[op] = per_op.get(op, 0) + 1
    others = dict(others_used or {})
    overlap = {s: len(facts & others.get(s, parts[s])) for s in FACT_STAGES if s != stage}
    return FactUse(per_op, overlap)
