"""Stage ``validate``: mean-ablation knockout (key vs random heads) and transfer to other data (paper §4).

Reads the ``validation`` section; writes ``validate/knockout_<op>.pt/.csv``,
``validate/transfer.pt/.csv`` and, when the position-free mean is used (``validation.ablation:
mean``, or a transfer set without counterfactual prompts such as real word problems),
``validate/head_means.pt``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from mathcircuits.ablation import TransferRow, head_means, knockout_curve, transfer
from mathcircuits.data import (
    GenerationConfig,
    PairSet,
    default_benchmark_root,
    generate_pairs,
    word_problem_dataset,
)
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.pipeline.context import Context, StageSummary, save_csv, select_pairs
from mathcircuits.pipeline.stages.identify import IdentifySummary

__all__ = ["KnockoutBrief", "ValidateSummary", "run"]

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
class ValidateSummary(StageSummary):
    """Final knockout accuracies per operation and the transfer table."""

    knockout: dict[str, KnockoutBrief] = field(default_factory=dict)
    transfer: list[TransferRow] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [
            f"  knockout {op}: top-{k.k} heads {k.baseline:.2f} -> {k.ranked_final:.2f}; "
            f"random {k.random_final_mean:.2f} ± {k.random_final_std:.2f}"
            for op, k in self.knockout.items()
        ]
        for r in self.transfer:
            head = f"  transfer {r.dataset:<45} n={r.n:<3} clean {r.clean_accuracy:.2f}"
            if not r.measured:
                out.append(f"{head}  {r.status} (too few items the clean model answers)")
                continue
            out.append(
                f"{head}  on its {r.n_correct} correct items: key-ablated "
                f"{r.key_ablated_accuracy:.2f} [{r.key_low:.2f}, {r.key_high:.2f}]  "
                f"random-ablated {r.random_ablated_accuracy:.2f}"
            )
        return out


def _transfer_sets(ctx: Context, correct: PairSet) -> dict[str, PairSet]:
    """The data the key heads should (or should not) matter for: other templates, operands, word problems."""
    v, d = ctx.config.validation, ctx.config.data
    tok = ctx.model.tokenizer
    sets: dict[str, PairSet] = {}
    for op in sorted(set(correct["operation"])) if v.transfer_held_in else []:
        sets[f"{op} (identification templates, correct)"] = select_pairs(correct, op, v.max_pairs)
    if d.heldout_templates:  # scored in the data stage, never seen by identify: right and wrong items
        held = ctx.load_dataset(ctx.paths.pairs_scored).filter(lambda r: r["template_id"] in d.heldout_templates)
        for op in sorted(set(held["operation"])):
            ids = sorted({t for t, o in zip(held["template_id"], held["operation"]) if o == op})
            sets[f"{op} held-out templates ({', '.join(ids)})"] = select_pairs(held, op, v.max_pairs)
    templates = ctx.templates()
    if v.transfer_templates:
        ids = tuple(t.id for s in templates for t in s.templates if t.form in ("time_span", "accumulation")) or None
        sets["add word templates (time span, accumulation)"] = generate_pairs(
            tok, templates, GenerationConfig(operations=("add",), template_ids=ids, n_per_template=4, seed=d.seed + 1)
        )
    if v.transfer_multi_digit:
        sets["add two-digit operands"] = generate_pairs(
            tok,
            templates,
            GenerationConfig(
                operations=("add",),
                template_ids=("add_eq_1",),
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
    if v.ablation == "mean" or any("cf_tokens" not in ds.column_names for ds in sets.values()):
        means_src = correct.filter(lambda r: r["operation"] in ops)
        means = head_means(model, select_pairs(means_src, None, 4 * v.max_pairs))
        means.save(paths.head_means)
    knockout: dict[str, KnockoutBrief] = {}
    # claim C2 reads the curve at k = the number of key heads: measure that k too
    n_key = min(len(key.heads), v.knockout_max_k)
    ks = sorted(set(v.knockout_ks) | ({n_key} if n_key else set())) if v.knockout_ks else None
    for op in ops:
        res = PatchingResult.load(paths.patching(op))
        ko = knockout_curve(
            model,
            select_pairs(correct, op, v.max_pairs),
            res,
            max_k=v.knockout_max_k,
            n_random=v.n_random,
            means=means,
            scope=v.scope,
            progress=ctx.progress,
            ablation=v.ablation,
            ks=ks,
        )
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
    found_on = set(key.source.operations or ops)
    tr = transfer(
        model,
        sets,
        list(key.heads),
        means,
        n_random=v.n_random,
        scope=v.scope,
        progress=ctx.progress,
        held_in=[f"{op} (identification templates, correct)" for op in found_on],
        ablation=v.ablation,
    )
    tr.save(paths.transfer())
    save_csv(tr.to_dataframe(), paths.transfer(".csv"))
    return ValidateSummary(knockout=knockout, transfer=list(tr.rows))
