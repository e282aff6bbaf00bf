"""Stage ``compare``: every fine-tuning mode at its own best learning rate, several seeds each, as resumable units.

Protocol (:mod:`mathcircuits.finetune.protocol`, settings :class:`~mathcircuits.finetune.CompareConfig`):

* **Facts, not prompts, are split.** The facts ``(operation, a, b)`` of ``finetune.operand_range`` are
  cut into disjoint train / validation / test parts (``compare.fact_shares``); each part is rendered in
  every arithmetic template, so no test item holds a trained fact in any wording. With
  ``compare.bare_prompts`` the prompts are the bare problem (``"3 + 5 = "``), no few-shot prefix.
* **Units.** base; a sweep of every mode over its grid (``compare.sweep_steps`` steps, seed 0);
  each mode's rate chosen on the validation facts; that rate trained ``finetune.max_steps`` steps with
  ``compare.seeds`` seeds; precise with ``kv_policy: exclusive`` as a sensitivity run. A unit saved is
  skipped on a rerun, so an interrupted stage resumes; ``compare.niceness`` lowers the process's priority.
* **Scores.** Math: teacher-forced answer log-probability and accuracy on the held-out facts (one forward
  per item). Generic: ``evaluation.benchmarks`` (likelihood benchmarks) through lm-eval, on the first
  ``compare.sweep_generic`` items (sweep) or ``evaluation.limit`` items (base, final units).

Writes ``compare/``: the pairs of each split; ``units/`` (one ``unit.json`` per unit, ``comparison.json``,
``progress.json``); ``table.csv`` (per mode: change against base, intervals over items and seeds);
``pareto.csv``; ``sweep.csv``; ``power.json`` (the smallest precise − full difference on math this run
detects at 80% power); ``figures/{pareto,deltas,sweep}.html`` (and ``.png`` when ``analysis.static_formats``
has it).
"""

from __future__ import annotations

import logging
import math
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from functools import partial

import pandas as pd
import torch
from transformers import PreTrainedModel

from mathcircuits._errors import FixableValueError
from mathcircuits._files import write_json
from mathcircuits._schema import ConfigError
from mathcircuits.claims import Verdict
from mathcircuits.claims.improve import claim_c6_units, claim_c6b
from mathcircuits.data import GenerationConfig, PairSet, generate_pairs, score_pairs
from mathcircuits.data.benchmark_files import default_benchmark_root
from mathcircuits.data.facts import split_facts
from mathcircuits.evaluation import BenchmarkItem, load_benchmark
from mathcircuits.evaluation.batching import model_device
from mathcircuits.evaluation.benchmarks import benchmark_paths, benchmark_spec
from mathcircuits.evaluation.harness import evaluate_lm_eval
from mathcircuits.finetune import ItemScores, Mode, Scorers, build_sft_dataset, compare_units
from mathcircuits.finetune.effects import (
    ParetoPoint,
    SweepPoint,
    effects_table,
    pareto_records,
    scores_matrix,
    sweep_records,
)
from mathcircuits.finetune.run_unit import execute_unit
from mathcircuits.models import Head, HFForward, PrefixRunner
from mathcircuits.patching import KeyComponents, PatchingResult, SelectionConfig, select_key_components
from mathcircuits.pipeline.config import RunConfig
from mathcircuits.pipeline.context import Context, StageSummary, save_csv, save_dataset
from mathcircuits.power import detectable_difference
from mathcircuits.stats import DeltaTable
from mathcircuits.viz import save_figures, sft_delta_bars, sft_sweep_curves
from mathcircuits.viz.export import find_chromium
from mathcircuits.viz.improve import pareto_plot

__all__: list[str] = []

log = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")


#: one row of the effects table (``compare/table.csv``): column → value; None where a value is undefined (NaN).
CompareRow = dict[str, str | int | float | None]


@dataclass(frozen=True)
class CompareClaim:
    """A claim the comparison decides (C6, C6b), as the CLI prints it."""

    id: str
    verdict: Verdict
    measurement: str


@dataclass(frozen=True)
class CompareSummary(StageSummary):
    """Data sizes, each mode's chosen rate (and whether it is at its grid's edge), the table, power and C6/C6b."""

    skipped: str | None = None
    train_pairs: int = 0
    validation_pairs: int = 0
    test_pairs: int = 0
    selected: dict[str, float] = field(default_factory=dict)
    at_edge: dict[str, str] = field(default_factory=dict)
    table: list[CompareRow] = field(default_factory=list)
    power: str = ""
    claims: list[CompareClaim] = field(default_factory=list)
    units: int = 0
    cpu_s: float = 0.0
    files: list[str] = field(default_factory=list)
    fewer_than_requested: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        if self.skipped:
            return [f"  skipped: {self.skipped}"]
        out = [f"  pairs: train {self.train_pairs}, validation {self.validation_pairs}, test {self.test_pairs}"]
        out += [f"  note: {split} pairs capped: {why}" for split, why in self.fewer_than_requested.items()]
        out += [f"  {self.units} units, {self.cpu_s / 3600:.2f} CPU hours"]
        for mode, lr in self.selected.items():
            edge = self.at_edge.get(mode, "")
            out.append(f"  {mode:<14} chosen lr {lr:g}" + (f"  (the {edge} of its grid: widen it)" if edge else ""))
        df = pd.DataFrame(self.table)
        cols = ["mode", "tuned params", "kv-shared heads",
                *DeltaTable.change_columns("math"), *DeltaTable.change_columns("generic")]  # fmt: skip
        if set(cols) <= set(df.columns):
            out += ["  " + line for line in df[cols].round(1).to_string(index=False).splitlines()]
        if self.power:
            out.append(f"  power: {self.power}")
        out += [f"  {c.id} {c.verdict}: {c.measurement}" for c in self.claims]
        return out


def check_sizes(cfg: RunConfig, names: list[str]) -> None:
    """Refuse pairs per template that the facts of a split cannot give (each fact makes one pair per template),
    when the stage is among ``names`` and enabled.

    Raises:
        ConfigError: naming the setting and the most the split holds.
    """
    c, f = cfg.compare, cfg.finetune
    if "compare" not in names or not c.enabled:
        return
    gen = GenerationConfig(operations=cfg.data.operations, operand_range=f.operand_range)
    parts = split_facts(gen, dict(zip(SPLITS, c.fact_shares)), seed=f.seed)
    names = {"train": "finetune.train_pairs_per_template", "validation": "compare.validation_pairs_per_template",
             "test": "compare.test_pairs_per_template"}  # fmt: skip
    sizes = {"train": f.train_pairs_per_template, "validation": c.validation_pairs_per_template,
             "test": c.test_pairs_per_template}  # fmt: skip
    for split in SPLITS:
        most = min(Counter(op for op, _, _ in parts[split]).values())
        if sizes[split] > most:
            raise ConfigError(
                f"{names[split]}={sizes[split]}, but the {split} facts (its share of finetune.operand_range "
                f"{list(f.operand_range)}, compare.fact_shares) give at most {most} pairs per template. ",
                f"set {names[split]} <= {most}, or widen finetune.operand_range.",
            )


def _fact_pairs(ctx: Context, facts: frozenset[tuple[str, int, int]], per_template: int, seed: int) -> PairSet:
    f, d, c = ctx.config.finetune, ctx.config.data, ctx.config.compare
    ids = ctx.arithmetic_template_ids()
    cfg = GenerationConfig(
        operations=d.operations,
        template_ids=ids,
        n_per_template=per_template,
        operand_range=f.operand_range,
        fewshot=d.fewshot and not c.bare_prompts,
        fewshot_operations=d.fewshot_operations,
        seed=seed,
    )
    return generate_pairs(ctx.model.tokenizer, ctx.templates(), cfg, facts=facts)


def _ranking(ctx: Context, modes: tuple[Mode, ...]) -> list[Head]:
    ks = [m.top_k for m in modes if m.top_k is not None]
    if not ks:
        return []
    topk = SelectionConfig(rule="topk", k=max(ks), mlp_k=0)
    chosen = select_key_components(PatchingResult.load(ctx.paths.patching("all")), topk)
    order = sorted(range(len(chosen.heads)), key=lambda i: -chosen.head_scores[i]) if chosen.head_scores else None
    return [chosen.heads[i] for i in order] if order else list(chosen.heads)


def _generic_items(ctx: Context) -> dict[str, list[BenchmarkItem]]:
    e = ctx.config.evaluation
    paths, missing = benchmark_paths(e.benchmarks, e.root, None if e.root else default_benchmark_root())
    if missing:
        log.warning(
            "no benchmark folder found (evaluation.root, MATHCIRCUITS_BENCHMARKS): no generic scores on %s",
            ", ".join(missing),
        )
    not_choice = [b for b in e.benchmarks if benchmark_spec(b).kind != "choice"]
    if not_choice:
        raise FixableValueError(
            f"evaluation.benchmarks has {not_choice}, which are not likelihood (multiple-choice) benchmarks; the "
            "compare stage scores math on held-out facts and generic ability by likelihood. ",
            "list choice benchmarks only (ARC-Easy, ARC-Challenge, BoolQ, OpenBookQA, MMLU, CommonsenseQA).",
        )
    out = {}
    for name, path in paths.items():
        items = load_benchmark(name, path=path, limit=e.limit, seed=ctx.config.data.seed)
        random.Random(ctx.config.data.seed).shuffle(items)  # any prefix (the sweep's items) is a random subset
        out[benchmark_spec(name).name] = items
    return out


def _scorers(ctx: Context, pairs: dict[str, PairSet], items: dict[str, list[BenchmarkItem]]) -> Scorers:
    tok = ctx.model.tokenizer

    def math_scores(model: PreTrainedModel, split: str) -> ItemScores:
        with torch.no_grad():
            s = score_pairs(PrefixRunner(HFForward(model)), pairs[split], batch_size=32, device=model_device(model))
        return ItemScores(tuple(int(c) for c in s.correct), tuple(float(x) for x in s.logp_answer))

    def generic_scores(model: PreTrainedModel, n: int | None) -> dict[str, ItemScores]:
        out = {}
        for name, its in items.items():
            score = evaluate_lm_eval(model, tok, its[:n], batch_size=16)
            logp = []
            for opts, it in zip(score.option_scores, its):
                t = torch.tensor(opts, dtype=torch.float64)
                logp.append(float(t[it.gold_index] - torch.logsumexp(t, 0)))
            out[name] = ItemScores(tuple(int(c) for c in score.correct), tuple(logp))
        return out

    return Scorers(math_scores, generic_scores, ctx.config.compare.sweep_generic)


def _lower_priority(level: int) -> None:
    if level > 0 and hasattr(os, "nice"):
        now = os.nice(0)
        if level > now:
            os.nice(level - now)


def run(ctx: Context) -> CompareSummary:
    """Run (or resume) every unit; write the table, the Pareto points and figures, the power statement, C6/C6b.

    Args:
        ctx: the run context.

    Returns:
        The stage summary.
    """
    c, f, paths = ctx.config.compare, ctx.config.finetune, ctx.paths
    if not c.enabled:
        return CompareSummary(skipped="compare.enabled is false")
    _lower_priority(c.niceness)
    if ctx.config.model.threads:
        torch.set_num_threads(ctx.config.model.threads)
    key = KeyComponents.load(paths.key_components)
    key.check_model(ctx.model.spec)
    tok = ctx.model.tokenizer
    gen = GenerationConfig(operations=ctx.config.data.operations, operand_range=f.operand_range)
    parts = split_facts(gen, dict(zip(SPLITS, c.fact_shares)), seed=f.seed)
    sizes = {"train": f.train_pairs_per_template, "validation": c.validation_pairs_per_template,
             "test": c.test_pairs_per_template}  # fmt: skip
    pairs = {s: _fact_pairs(ctx, parts[s], sizes[s], f.seed + 101 * (i + 1)) for i, s in enumerate(SPLITS)}
    fewer = {}
    for split, ds in pairs.items():
        save_dataset(ds, paths.compare_pairs(split))
        made = Counter(ds.template_ids)
        if min(made.values(), default=0) < sizes[split]:
            fewer[split] = (
                f"{min(made.values(), default=0)}-{max(made.values(), default=0)} per template of the "
                f"{sizes[split]} asked for (its {len(parts[split])} facts hold no more)"
            )
    items = _generic_items(ctx)
    plan = c.plan(f.max_steps)
    execute = partial(
        execute_unit,
        factory=lambda: ctx.hf_model()[0],
        tokenizer=tok,
        train_dataset=build_sft_dataset(tok, pairs["train"], target="answer"),
        key=key,
        config=f.sft("precise", progress=False),
        scorers=_scorers(ctx, pairs, items),
        model_name=ctx.model.spec.name,
        ranking=_ranking(ctx, c.modes),
    )
    cmp = compare_units(plan, paths.compare_units, execute, echo=print if ctx.progress else log.info)
    effects = effects_table(cmp)
    table = effects.to_dataframe()
    points = pareto_records(cmp)
    sweep = sweep_records(cmp)
    save_csv(table.reset_index(), paths.compare_table)
    save_csv(ParetoPoint.frame(points), paths.compare_points)
    save_csv(SweepPoint.frame(sweep), paths.compare_sweep)
    power = ""
    if cmp.final("precise") and cmp.final("full"):
        p = detectable_difference(scores_matrix(cmp.final("precise"), "math"), scores_matrix(cmp.final("full"), "math"))
        power = "smallest precise − full difference on math detected at 80% power: " + p.describe()
        write_json(paths.compare_power, {"statement": power, **{k: getattr(p, k) for k in p.__dataclass_fields__}})
    figs = {
        paths.compare_figure("pareto"): pareto_plot(points, effects.changes),
        paths.compare_figure("deltas"): sft_delta_bars(effects.changes),
        paths.compare_figure("sweep"): sft_sweep_curves(sweep),
    }
    formats = [x for x in ctx.config.analysis.static_formats if x == "png"] if find_chromium() else []
    files = [str(p) for p in save_figures({str(k): v for k, v in figs.items()}, formats=["html", *formats])]
    claims = [claim_c6_units(cmp), claim_c6b(cmp)]
    return CompareSummary(
        train_pairs=len(pairs["train"]),
        validation_pairs=len(pairs["validation"]),
        test_pairs=len(pairs["test"]),
        selected={m: ch.learning_rate for m, ch in cmp.choices.items()},
        at_edge={m: ch.edge for m, ch in cmp.choices.items() if ch.at_edge},
        table=table.reset_index().round(4).replace({math.nan: None}).to_dict(orient="records"),
        power=power,
        claims=[CompareClaim(cl.id, cl.verdict, cl.measurement) for cl in claims],
        units=len(cmp.records),
        cpu_s=cmp.cpu_s,
        files=[str(p) for p in (paths.compare_table, paths.compare_points, paths.compare_sweep)] + files,
        fewer_than_requested=fewer,
    )
