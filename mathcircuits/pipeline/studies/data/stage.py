"""Stage ``data``: build reference/counterfactual pairs, score the model, keep the correct ones (paper §3.1).

Reads the ``model`` and ``data`` sections; writes ``data/pairs_scored`` (every pair, scored),
``data/pairs_correct`` (the correct pairs of the identification templates: every template except
``data.heldout_templates``, which validate keeps for transfer) and ``data/accuracy.csv``. Every pair carries
``fact_stage``, the stage that owns its fact ``(op, a, b)`` in the declared partition
(:mod:`~mathcircuits.pipeline.facts`): identify, validate, analyze and circuit each draw only their own facts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mathcircuits._errors import FixableValueError
from mathcircuits.data import Operation, accuracy_table, filter_correct, generate_pairs, score_pairs
from mathcircuits.pipeline.context import Context, StageSummary, save_csv, save_dataset
from mathcircuits.pipeline.facts import FACT_STAGES, tag_fact_stages

__all__: list[str] = []


@dataclass(frozen=True)
class OperationAccuracy:
    """The model's accuracy on one operation's pairs (all templates)."""

    operation: Operation
    n: int
    accuracy: float
    mean_p_answer: float


@dataclass(frozen=True)
class DataSummary(StageSummary):
    """Pairs built and kept, and the model's accuracy per operation."""

    n_pairs: int
    n_correct: int
    n_heldout: int = 0
    accuracy_by_operation: list[OperationAccuracy] = field(default_factory=list)
    requested_per_template: int = 0
    fewer_than_requested: dict[str, int] = field(default_factory=dict)
    facts_by_stage: dict[str, int] = field(default_factory=dict)  # facts (op, a, b) each stage owns
    correct_by_stage: dict[str, int] = field(default_factory=dict)  # correct pairs whose fact each stage owns
    facts_shared_by_stages: int = 0  # facts in two stages' parts (0: the partition is disjoint)

    def lines(self) -> list[str]:
        out = ["  accuracy by operation (all templates):"]
        for row in self.accuracy_by_operation:
            out.append(
                f"    {row.operation:<5} n={row.n:<4} accuracy={row.accuracy:.3f}  "
                f"mean p(answer)={row.mean_p_answer:.3f}"
            )
        held = f" ({self.n_heldout} pairs of held-out templates kept for transfer)" if self.n_heldout else ""
        out.append(f"  correct pairs kept: {self.n_correct} of {self.n_pairs}{held}")
        if self.facts_by_stage:
            out.append(
                "  facts (op, a, b) by stage, disjoint: "
                + ", ".join(
                    f"{s} {n} ({self.correct_by_stage.get(s, 0)} correct pairs)" for s, n in self.facts_by_stage.items()
                )
                + f"; facts in two stages: {self.facts_shared_by_stages}"
            )
        if self.fewer_than_requested:
            few = ", ".join(f"{t} {n}" for t, n in sorted(self.fewer_than_requested.items()))
            out.append(
                f"  note: {len(self.fewer_than_requested)} templates gave fewer than the "
                f"{self.requested_per_template} pairs asked for (data.operand_range holds no more): {few}"
            )
        return out


def run(ctx: Context) -> DataSummary:
    """Build the prompt pairs, score the model on them, keep the correct ones.

    Args:
        ctx: the run context.

    Returns:
        The stage summary.
    """
    d, paths = ctx.config.data, ctx.paths
    model = ctx.model
    parts = d.stage_facts()
    pairs = tag_fact_stages(generate_pairs(model.tokenizer, ctx.templates(), d.generation()), parts)
    made = Counter(pairs.template_ids)
    fewer = {t: n for t, n in made.items() if n < d.n_per_template}
    scored = score_pairs(model, pairs, device=model.device, progress=ctx.progress)
    held = set(d.heldout_templates)
    unknown = held - set(scored.template_ids)
    if unknown:
        raise FixableValueError(
            f"data.heldout_templates names {sorted(unknown)}, which no generated pair uses. ",
            "name templates of data.operations (their ids are in data_templates/*.yaml).",
        )
    found_on = scored.of_templates(held, keep=False) if held else scored
    correct = filter_correct(found_on) if d.keep_only_correct else found_on
    table = accuracy_table(scored)
    save_dataset(scored, paths.pairs_scored)
    save_dataset(correct, paths.pairs_correct)
    save_csv(table, paths.accuracy_csv)
    per_op = table[table["template_id"] == "(all)"][["operation", "n", "accuracy", "mean_p_answer"]]
    return DataSummary(
        n_pairs=len(scored),
        n_correct=len(correct),
        n_heldout=len(scored) - len(found_on),
        accuracy_by_operation=[OperationAccuracy(**r) for r in per_op.to_dict(orient="records")],
        requested_per_template=d.n_per_template,
        fewer_than_requested=fewer,
        facts_by_stage={s: len(parts[s]) for s in FACT_STAGES},
        correct_by_stage={s: sum(1 for t in correct.fact_stages if t == s) for s in FACT_STAGES},
        facts_shared_by_stages=sum(
            len(parts[a] & parts[b]) for i, a in enumerate(FACT_STAGES) for b in FACT_STAGES[i + 1 :]
        ),
    )
