"""Stage ``validate``: knockout of the key heads on fresh pairs, against depth-matched random sets (paper §3.3-3.4).

Fresh pairs. Identify and validate own disjoint facts ``(op, a, b)`` (:mod:`~mathcircuits.pipeline.facts`):
validate scores up to ``validation.max_pairs`` correct pairs of each operation drawn from its own facts, so no
pair that chose the heads, and no other wording of one, scores them. The overlap with identify's pairs and with
their facts (read back from the saved patching results' pair ids) is written into the summary, and must be 0.
The control pairs (claim C2) are taken round-robin over the templates
(:func:`~mathcircuits.pipeline.context.template_spread`), so every template is a cluster of the interval.

Reads the ``validation`` section; writes ``validate/knockout_<op>.pt/.csv`` (the curves),
``validate/control.pt/.csv`` (the pooled key set against ``validation.control_draws`` depth-matched random sets
of non-key heads: claim C2), ``validate/mlp_margin.pt`` (the later MLPs' answer margin with the key heads
knocked out), ``validate/mlp_mediation.pt`` (the key heads' effect split into the part through the later MLPs
and the rest, beside the random sets': claim C4),
``validate/cross_operation.pt/.csv`` (each operation's own key set knocked out on every
operation), ``validate/transfer.pt/.csv`` (claim C5) and, when the position-free mean is used
(``validation.ablation: mean``, or a transfer set without counterfactual prompts such as real word problems),
``validate/head_means.pt``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from mathcircuits._errors import FixableRuntimeError
from mathcircuits.ablation import (
    KnockoutScorer,
    PositionPool,
    TransferRow,
    control_margin_mediation,
    cross_operation,
    head_means,
    knockout_curve,
    transfer,
)
from mathcircuits.ablation.config import ValidationConfig
from mathcircuits.claims.paper import C_NO_BETTER
from mathcircuits.data import GenerationConfig, Operation, PairSet, generate_pairs, word_problem_dataset
from mathcircuits.data.benchmark_files import default_benchmark_root
from mathcircuits.patching import KeyComponents, PatchingResult, select_key_components
from mathcircuits.patching.key_components import median_depth
from mathcircuits.pipeline.config import multi_digit_template
from mathcircuits.pipeline.context import Context, StageSummary, save_csv, select_pairs, template_spread
from mathcircuits.pipeline.facts import FactUse, fact_use, stage_rows
from mathcircuits.pipeline.studies.shared import IdentifySummary, patched_facts

__all__: list[str] = []

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KnockoutBrief:
    """One operation's knockout curve at its largest k: accuracy before, after the top-k heads, after random ones."""

    baseline: float
    ranked_final: float
    random_final_mean: float
    random_final_std: float
    k: int


@dataclass(frozen=True)
class ControlBrief:
    """The pooled key set against depth-matched random sets on fresh pairs, and the later MLPs' margin drop."""

    n_pairs: int
    draws: int  # random sets drawn (fewer than validation.control_draws when the sequential test stopped early)
    baseline: float
    key_drop: float
    random_drop_mean: float
    percentile: float
    p_value: float
    mlp_margin_drop: float
    templates: int = 0  # templates the control pairs span (every template of the scored operations)
    mlp_mediated_share: float = float("nan")  # of the key heads' effect on the answer, the later MLPs' share (C4)
    random_mediated_share: float = float("nan")  # ... and of the random sets' effect


@dataclass(frozen=True)
class ValidateSummary(StageSummary):
    """Fresh pairs and their overlap with identification, knockout accuracies, the control and the transfer table."""

    knockout: dict[Operation, KnockoutBrief] = field(default_factory=dict)
    transfer: list[TransferRow] = field(default_factory=list)
    fresh_pairs: dict[Operation, int] = field(default_factory=dict)
    overlap: dict[Operation, int] = field(default_factory=dict)  # per operation: fresh pairs that identify also used
    control: ControlBrief | None = None
    cross_operation: list[str] = field(default_factory=list)  # per source operation: its key set on every operation
    facts: FactUse | None = None  # the facts of the fresh (and control) pairs; shared with identify's: 0

    def lines(self) -> list[str]:
        out = []
        if self.fresh_pairs:
            out.append(
                "  fresh pairs (not used by identify): "
                + ", ".join(f"{op} {n} (overlap {self.overlap.get(op, '?')})" for op, n in self.fresh_pairs.items())
            )
        if self.facts is not None:
            out.append(self.facts.line())
        if self.control is not None:
            c = self.control
            out.append(
                f"  key set on {c.n_pairs} fresh pairs ({c.templates} templates): "
                f"accuracy {c.baseline:.2f} -> {c.baseline - c.key_drop:.2f}; "
                f"{c.draws} depth-matched random sets {c.baseline - c.random_drop_mean:.2f} on average; "
                f"key set at percentile {c.percentile:.0f} (p = {c.p_value:.3f}); "
                f"later MLPs' answer margin drop {c.mlp_margin_drop:+.2f} logits; they carry "
                f"{c.mlp_mediated_share:.0%} of the key heads' effect, {c.random_mediated_share:.0%} of random sets'"
            )
        out += self.cross_operation
        out += [
            f"  knockout {op}: top-{k.k} heads {k.baseline:.2f} -> {k.ranked_final:.2f}; "
            f"random {k.random_final_mean:.2f} ± {k.random_final_std:.2f}"
            for op, k in self.knockout.items()
        ]
        for r in self.transfer:
            head = f"  transfer {r.dataset:<45} n={r.n:<3} clean {r.clean.value:.2f}"
            if not r.measured:
                out.append(f"{head}  {r.status} (too few items the clean model answers)")
                continue
            out.append(
                f"{head}  on its {r.n_correct} correct items: key-ablated "
                f"{r.key.value:.2f} [{r.key.low:.2f}, {r.key.high:.2f}]  "
                f"random-ablated {r.random.value:.2f}"
            )
        return out


def _transfer_sets(ctx: Context, correct: PairSet) -> dict[str, PairSet]:
    """The data the key heads should (or should not) matter for: other templates, operands, word problems."""
    v, d = ctx.config.validation, ctx.config.data
    tok = ctx.model.tokenizer
    sets: dict[str, PairSet] = {}
    for op in sorted(set(correct.operations)) if v.transfer_held_in else []:
        sets[f"{op} (identification templates, correct)"] = select_pairs(
            stage_rows(correct, "identify"), op, ctx.config.patching.max_pairs
        )
    if d.heldout_templates:  # scored in the data stage, never seen by identify: right and wrong items, own facts
        held = stage_rows(ctx.load_dataset(ctx.paths.pairs_scored), "validate")
        held = held.of_templates(d.heldout_templates)
        for op in sorted(set(held.operations)):
            ids = sorted({t for t, o in zip(held.template_ids, held.operations) if o == op})
            sets[f"{op} held-out templates ({', '.join(ids)})"] = select_pairs(held, op, v.max_pairs)
    templates = ctx.templates()
    if v.transfer_templates:
        ids = tuple(t.id for s in templates for t in s.templates if t.form in ("time_span", "accumulation")) or None
        sets["add word templates (time span, accumulation)"] = generate_pairs(
            tok, templates, GenerationConfig(operations=("add",), template_ids=ids, n_per_template=4, seed=d.seed + 1)
        )
    if v.transfer_multi_digit:  # the config check made sure the rule finds a template
        sets["add two-digit operands"] = generate_pairs(
            tok,
            templates,
            GenerationConfig(
                operations=("add",),
                template_ids=(str(multi_digit_template(ctx.config)),),
                operand_range=(10, 99),
                n_per_template=v.max_pairs,
                seed=d.seed + 2,
            ),
        )
    root = Path(v.word_problem_root) if v.word_problem_root else default_benchmark_root()
    if root is None:
        log.warning("no benchmark folder found: word-problem transfer skipped (set MATHCIRCUITS_BENCHMARKS)")
        return sets
    for name in v.word_problem_sets:
        f = root / name / "test.json"
        if f.exists():
            sets[f"{name} word problems"] = word_problem_dataset(tok, f, limit=v.word_problem_limit, fewshot=1)
        else:
            log.warning("word-problem set %s: %s is missing, so its transfer is skipped", name, f)
    return sets


def decided_at(v: ValidationConfig) -> float | None:
    """Where the random-set comparisons' sequential tests stop (``validation.sequential``): once p >= the claims'
    "no better than a typical draw" threshold is certain, the verdict cannot change; None: every planned draw."""
    return C_NO_BETTER if v.sequential else None


def fresh_pairs(ctx: Context, correct: PairSet, op: Operation, limit: int) -> tuple[PairSet, int]:
    """An operation's pairs of validate's own facts, and how many of them identify patched (must be 0).

    Args:
        ctx: the run context.
        correct: the correct pairs (tagged with ``fact_stage`` by the data stage).
        op: the operation.
        limit: the most pairs returned (fewer when validate's facts hold fewer correct pairs).

    Returns:
        ``(pairs, overlap)``: up to ``limit`` rows of validate's facts in a seeded order, and the number of them
        whose ``pair_id`` is among the saved patching result's pair ids.
    """
    pairs = select_pairs(stage_rows(correct, "validate"), op, limit)
    used = set(PatchingResult.load(ctx.paths.patching(op)).pair_ids)
    return pairs, sum(1 for i in pairs.pair_ids if i in used) if len(pairs) else 0


def run(ctx: Context) -> ValidateSummary:
    """Knockout curves (key vs random heads) and transfer to other data.

    Args:
        ctx: the run context.

    Returns:
        The stage summary.
    """
    v, paths = ctx.config.validation, ctx.paths
    model = ctx.model
    key = KeyComponents.load(paths.key_components)
    key.check_model(model.spec)
    correct = ctx.load_dataset(paths.pairs_correct)
    ops = ctx.summary("identify", IdentifySummary).patched_operations
    sets = _transfer_sets(ctx, correct)
    means = None  # the position-free means: for ablation "mean", and sets without counterfactual prompts
    if v.ablation == "mean" or any(not ds.has("cf_tokens") for ds in sets.values()):
        means_src = stage_rows(correct, "validate").of_operations(ops)
        means = head_means(model, select_pairs(means_src, None, 4 * v.max_pairs))
        means.save(paths.head_means)
    # position_mean: each head's per-position mean over every generated counterfactual prompt of the template,
    # leaving the scored pair's own out (not over the few scored pairs of that template)
    pool = PositionPool(model, ctx.load_dataset(paths.pairs_scored)) if v.ablation == "position_mean" else None
    knockout: dict[Operation, KnockoutBrief] = {}
    fresh: dict[Operation, PairSet] = {}
    overlap: dict[Operation, int] = {}
    for op in ops:
        fresh[op], overlap[op] = fresh_pairs(ctx, correct, op, v.max_pairs)
        if overlap[op]:
            raise FixableRuntimeError(
                f"{overlap[op]} of the {len(fresh[op])} knockout pairs of {op} were also used by identify. ",
                "re-run identify and validate with --force (the run folder mixes two versions).",
            )
        if not len(fresh[op]):
            log.warning("%s: no correct pairs among validate's facts: no knockout", op)
    identify_facts = patched_facts(ctx, correct)
    scored = [op for op in ops if len(fresh[op])]
    # the knockout curves read at k = the number of key heads too
    n_key = min(len(key.heads), v.knockout_max_k)
    ks = sorted(set(v.knockout_ks) | ({n_key} if n_key else set())) if v.knockout_ks else None
    # one scorer per operation's fresh pairs serves its knockout curve and the cross-operation table (their clean
    # runs and replacement values computed once); the curve draws resampling donors with seed 0
    seed = ctx.config.data.seed
    scorers = {op: KnockoutScorer(model, fresh[op], v.ablation, means, v.scope, seed, pool=pool) for op in scored}
    for op in scored:
        res = PatchingResult.load(paths.patching(op))
        same = scorers[op] if v.ablation != "resample" or seed == 0 else None
        ko = knockout_curve(model, fresh[op], res, v, means=means, progress=ctx.progress, ks=ks, pool=pool,
                            scorer=same)  # fmt: skip
        ko.save(paths.knockout(op))
        save_csv(ko.to_dataframe(), paths.knockout(op, ".csv"))
        finals = ko.random_accuracy[:, -1]
        knockout[op] = KnockoutBrief(
            baseline=ko.baseline_accuracy,
            ranked_final=ko.ranked_accuracy[-1],
            random_final_mean=float(finals.mean()),
            random_final_std=float(finals.std()) if ko.random_accuracy.shape[0] > 1 else 0.0,
            k=ko.ks[-1],
        )
    brief = None
    cross_lines: list[str] = []
    if key.heads and scored:
        # claim C2: the pooled key set itself against depth-matched random sets of non-key heads, on fresh pairs
        # every template of each operation, round-robin: the templates are the clusters of C2's interval
        pooled = PairSet.concat(
            [fresh[op].select(template_spread(fresh[op], seed)[: v.control_pairs]) for op in scored]
        )
        scorer = KnockoutScorer(model, pooled, v.ablation, means, v.scope, ctx.config.data.seed, pool=pool)
        # claim C4: the MLPs from the key heads' median layer on, clean and with the key heads knocked out
        n_layers = model.spec.n_layers
        ref = int(median_depth([l for l, _ in key.heads], n_layers) * max(1, n_layers - 1))
        # ... against the random sets C2 knocks out (C4's null): one knocked-out run per set serves C2, C4's margin
        # and its mediation's free runs; the mediation's frozen runs are the only extra ones
        control, margin, mediation = control_margin_mediation(
            model,
            pooled,
            key.heads,
            range(ref, n_layers),
            v,
            scorer,
            seed=ctx.config.data.seed,
            label="fresh correct pairs, " + ", ".join(scored),
            identification_overlap=sum(overlap.values()),
            progress=ctx.progress,
            decided_at=decided_at(v),
        )
        control.save(paths.control())
        save_csv(control.to_dataframe(), paths.control(".csv"))
        margin.save(paths.mlp_margin)
        mediation.save(paths.mlp_mediation)
        d = control.random_drops()
        brief = ControlBrief(
            n_pairs=control.n_pairs,
            draws=len(control.draws),
            baseline=control.baseline(),
            key_drop=control.key_drop(),
            random_drop_mean=float(d.mean()),
            percentile=control.percentile(),
            p_value=control.p_value(),
            mlp_margin_drop=margin.drop(),
            mlp_mediated_share=mediation.share(0),
            random_mediated_share=mediation.pooled_random_share(),
            templates=len(set(pooled.template_ids)),
        )
        log.info("C2 random control: %s; C4 margin: %s", control.sequential.describe(), margin.sequential.describe())
        # per operation: each operation's own key set (the same rule), knocked out on every operation
        own = {
            op: select_key_components(PatchingResult.load(paths.patching(op)), ctx.config.selection).heads
            for op in scored
        }
        cross = cross_operation(scorers, own)
        cross.save(paths.cross_operation())
        df = cross.to_dataframe()
        save_csv(df, paths.cross_operation(".csv"))
        for src, rows in df.groupby("source", sort=False):
            cross_lines.append(
                f"  key set of {src} ({int(rows.source_heads.iloc[0])} heads) knocked out: "
                + ", ".join(
                    f"{r.target} {r.drop:+.2f} (shares {r.shared} heads, Jaccard {r.jaccard:.2f})"
                    for r in rows.itertuples()
                )
            )
    found_on = set(key.source.operations or ops)
    tr = transfer(
        model,
        sets,
        list(key.heads),
        means,
        v,
        progress=ctx.progress,
        held_in=[f"{op} (identification templates, correct)" for op in found_on],
        pool=pool,
        decided_at=decided_at(v),
    )
    tr.save(paths.transfer())
    save_csv(tr.to_dataframe(), paths.transfer(".csv"))
    return ValidateSummary(
        knockout=knockout,
        transfer=list(tr.rows),
        fresh_pairs={op: len(fresh[op]) for op in ops},
        overlap=overlap,
        control=brief,
        cross_operation=cross_lines,
        facts=fact_use(
            "validate",
            PairSet.concat([fresh[op] for op in scored]) if scored else frozenset(),
            ctx.config.data.stage_facts(),
            {"identify": identify_facts},
        ),
    )
