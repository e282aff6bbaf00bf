"""Stage ``circuit``: each operation's circuit, found until it saturates, and its faithfulness curve.

Per operation it generates pairs of the identification templates on its own facts (no fact of identify,
validate or analyze) with the chosen counterfactual (operand counterfactuals by default, so operand paths
can be found), keeps the correct ones and — with at least ``circuit.min_pairs`` — splits them into disjoint
discovery and evaluation pairs, stratified by template. A saved file is not computed again: an interrupted
stage resumes with the faithfulness of a circuit it found, or with the next operation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from mathcircuits._files import atomic_path
from mathcircuits._io import ResultFileError
from mathcircuits._schema import ConfigError
from mathcircuits.circuit import Circuit, Faithfulness, discover_circuit, faithfulness, label_roles
from mathcircuits.circuit.pool import scored_operands
from mathcircuits.circuit.subcircuits import top_circuit
from mathcircuits.data import Operation, filter_correct, generate_pairs, score_pairs
from mathcircuits.data.facts import Fact, facts_of
from mathcircuits.data.pairset import PairSet
from mathcircuits.pipeline.context import Context, StageSummary, template_spread
from mathcircuits.pipeline.facts import FactUse, fact_use
from mathcircuits.viz.circuit_graph import circuit_graph
from mathcircuits.viz.faithfulness_curve import faithfulness_curve

__all__: list[str] = []


@dataclass(frozen=True)
class CircuitBrief:
    """One operation's circuit, in brief: its size, why discovery stopped, the pairs, the time and its curve."""

    nodes: int
    edges: int
    stopped: str
    discovery_pairs: int
    eval_pairs: int
    seconds: float
    faith: str  # Faithfulness.summary(): the plateau against its random band, the denominator
    ill_conditioned: bool


@dataclass(frozen=True)
class CircuitSummary(StageSummary):
    """Per operation: the circuit's size, the denominator, the plateau and the whole circuit's faithfulness."""

    circuits: dict[Operation, CircuitBrief] = field(default_factory=dict)
    skipped: dict[Operation, int] = field(default_factory=dict)
    disabled: bool = False
    facts: FactUse | None = None  # the facts of the discovery and evaluation pairs, and how many another stage owns

    def lines(self) -> list[str]:
        if self.disabled:
            return ["  circuit: skipped (circuit.enabled is false)"]
        out = [
            f"  circuit {op}: skipped, {n} correct pairs (fewer than circuit.min_pairs)"
            for op, n in self.skipped.items()
        ]
        out += [self.facts.line()] if self.facts is not None else []
        for op, c in self.circuits.items():
            out.append(
                f"  circuit {op}: {c.nodes} nodes, {c.edges} edges ({c.stopped}), "
                f"{c.discovery_pairs} discovery / {c.eval_pairs} evaluation pairs, {c.seconds:.0f} s; {c.faith}"
            )
        return out


def split_pairs(pairs: PairSet, n_discovery: int, n_eval: int, seed: int) -> tuple[list[int], list[int]]:
    """Disjoint discovery and evaluation rows, each spread over the templates (round-robin in a seeded order).

    ``n_eval`` is a maximum.
    """
    order = template_spread(pairs, seed)
    return sorted(order[:n_discovery]), sorted(order[n_discovery : n_discovery + n_eval])


def circuit_templates(ctx: Context, op: Operation) -> list[str]:
    """The templates of ``op`` the stage draws pairs from (``circuit.template_ids``, else the data section's)."""
    c, d = ctx.config.circuit, ctx.config.data
    ids = c.template_ids or tuple(t for t in (d.template_ids or ()) if t not in d.heldout_templates)
    sets = ctx.templates()
    known = [t.id for s in sets for t in s.templates if t.operation == op]
    return [t for t in known if not ids or t in ids]


def circuit_pairs(ctx: Context, op: Operation, n: int, seed: int, own_facts: bool = True) -> PairSet:
    """``n`` pairs per template of ``op`` as the stage generates them: its candidates, of the circuit stage's facts
    (``own_facts``), or its pool, of any fact."""
    d, c = ctx.config.data, ctx.config.circuit
    ids = tuple(circuit_templates(ctx, op))
    gen = replace(
        d.generation(), operations=(op,), template_ids=ids, n_per_template=n, counterfactual=c.counterfactual, seed=seed
    )
    facts = d.stage_facts()["circuit"] if own_facts else None
    return generate_pairs(ctx.model.tokenizer, ctx.templates(), gen, facts=facts)


def run(ctx: Context) -> CircuitSummary:
    """Find each operation's circuit and measure its faithfulness curve."""
    c, paths = ctx.config.circuit, ctx.paths
    if not c.enabled:
        return CircuitSummary(disabled=True)
    model = ctx.model
    out: dict[Operation, CircuitBrief] = {}
    skipped: dict[Operation, int] = {}
    used: set[Fact] = set()
    for op in ctx.config.data.operations:
        if not circuit_templates(ctx, op):
            continue
        scored = score_pairs(model, circuit_pairs(ctx, op, c.n_per_template, ctx.config.data.seed), device=model.device)
        correct = filter_correct(scored) if ctx.config.data.keep_only_correct else scored
        if len(correct) < c.min_pairs:
            skipped[op] = len(correct)
            continue
        disc_rows, eval_rows = split_pairs(correct, c.discovery_pairs, c.eval_pairs, ctx.config.data.seed)
        disc, ev = correct.select(disc_rows), correct.select(eval_rows)
        used |= facts_of(disc) | facts_of(ev)
        try:
            found = Circuit.load(paths.circuit(op))
        except (FileNotFoundError, ResultFileError):
            found = discover_circuit(model, disc, config=c, progress=ctx.progress)
            found = label_roles(model, disc, found)
            found = replace(found, data=replace(found.data, eval_pair_ids=list(ev.pair_ids)))
            found.save(paths.circuit(op))
        try:
            faith = Faithfulness.load(paths.circuit_faithfulness(op))
        except (FileNotFoundError, ResultFileError):
            # the pool only supplies position means (the scored operands left out), so it may hold any fact
            pool = circuit_pairs(ctx, op, c.pool_per_template, ctx.config.data.seed + 1, own_facts=False)
            if "position_mean" in c.ablations and (missing := _uncovered(ev, pool)):
                _refuse_pool(ctx, op, ev, missing)  # before its faithfulness runs: the setting that fixes it
            # the data seed draws the random circuits and the bootstrap
            faith = faithfulness(model, ev, found, pool=pool, config=c, uncertainty=c.uncertainty(ctx.config.data.seed))
            faith.save(paths.circuit_faithfulness(op))
        with atomic_path(paths.circuit_graph(op)) as tmp:
            circuit_graph(top_circuit(found, faith.plateau_size) if faith.curve else found, faith).write_html(
                str(tmp), include_plotlyjs=True
            )
        with atomic_path(paths.circuit_curve(op)) as tmp:
            faithfulness_curve(faith).write_html(str(tmp), include_plotlyjs=True)
        out[op] = CircuitBrief(
            nodes=len(found.nodes) - 1,
            edges=len(found.edges),
            stopped=found.settings.stopped,
            discovery_pairs=len(disc),
            eval_pairs=len(ev),
            seconds=found.seconds + faith.seconds,
            faith=faith.summary(),
            ill_conditioned=faith.ill_conditioned,
        )
    facts = fact_use("circuit", frozenset(used), ctx.config.data.stage_facts())
    return CircuitSummary(circuits=out, skipped=skipped, facts=facts)


#: the largest counterfactual pool per template :func:`check_pool` tries when it looks for the fix
POOL_SEARCH_LIMIT = 4096


def _keys(ds: PairSet) -> list[tuple[str, int, int]]:
    return [(t, len(p), len(a)) for t, p, a in zip(ds.template_ids, ds.tokens, ds.answer_tokens)]


def _uncovered(evaluated: PairSet, pool: PairSet) -> list[tuple[str, int, int]]:
    """Keys (template, prompt tokens, answer tokens) of the evaluated pairs whose positions no pool prompt
    reaches once the evaluated pairs' operands are left out, by the rule of
    :class:`~mathcircuits.circuit.pool.PoolMeans`:
    the pool is keyed on template and prompt length, and its longest answer must reach the evaluated answer's end."""
    taken = scored_operands(evaluated)
    reach: dict[tuple[str, int], int] = {}
    for (t, n, a), key in zip(_keys(pool), zip(pool.template_ids, pool.a, pool.b)):
        if key not in taken:
            reach[(t, n)] = max(reach.get((t, n), 0), a)
    return sorted(k for k in set(_keys(evaluated)) if reach.get(k[:2], 0) < k[2])


def _refuse_pool(ctx: Context, op: Operation, evaluated: PairSet, missing: list[tuple[str, int, int]]) -> None:
    """Raise the error that names ``circuit.pool_per_template`` and a size whose pool covers ``evaluated``."""
    c, seed = ctx.config.circuit, ctx.config.data.seed
    size = c.pool_per_template
    while size < POOL_SEARCH_LIMIT and _uncovered(evaluated, circuit_pairs(ctx, op, size, seed + 1, own_facts=False)):
        size *= 2
    enough = f"e.g. {size}" if size < POOL_SEARCH_LIMIT else "much larger"
    t, n, a = missing[0]
    raise ConfigError(
        f"the circuit stage's counterfactual pool ({c.pool_per_template} prompts per template) has no prompt "
        f"of template {t!r} with {n} prompt tokens and {a} or more answer tokens that the evaluated pairs leave in, so "
        f"position_mean has nothing to average ({len(missing)} such template/length group(s) for {op}). ",
        f"raise circuit.pool_per_template ({enough}), or leave position_mean out of circuit.ablations.",
    )


def check_pool(ctx: Context, names: list[str]) -> None:
    """Before any stage writes: the circuit stage's pool covers the pairs it will evaluate (tokenizer only).

    The evaluated pairs are known in advance when ``data.keep_only_correct`` is false (the stage then evaluates
    its generated pairs, split by seed); otherwise they depend on the model's answers and the stage checks its
    pool when it has them, with the same ConfigError naming ``circuit.pool_per_template``.
    """
    c, d = ctx.config.circuit, ctx.config.data
    if "circuit" not in names or not c.enabled or "position_mean" not in c.ablations or d.keep_only_correct:
        return
    for op in d.operations:
        if not circuit_templates(ctx, op):
            continue
        cand = circuit_pairs(ctx, op, c.n_per_template, d.seed)
        if len(cand) < c.min_pairs:
            continue  # the stage skips the operation (and says so)
        evaluated = cand.select(split_pairs(cand, c.discovery_pairs, c.eval_pairs, d.seed)[1])
        if missing := _uncovered(evaluated, circuit_pairs(ctx, op, c.pool_per_template, d.seed + 1, own_facts=False)):
            _refuse_pool(ctx, op, evaluated, missing)
