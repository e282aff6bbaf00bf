"""Stage ``compare``: every fine-tuning mode at its own best learning rate, same data, steps and batch (issue #11).

Protocol (:func:`mathcircuits.finetune.compare_sft`): the training pairs of the finetune stage's
settings; a held-out test set (another seed, no training prompt); a validation set (a third seed,
no training or test prompt). Every mode of ``compare.modes`` is trained at every rate of
``compare.learning_rates`` with the ``finetune`` section's steps, batch and schedule; each mode's
rate is the one with the best validation accuracy. The selected models are then scored on the test
pairs and on ``evaluation.benchmarks`` (``evaluation.limit`` items each), and the table gives every
accuracy with its Wilson interval and every difference to base with its paired-bootstrap interval.

Writes ``compare/``: ``comparison.json`` and ``sweep.csv`` (the sweep, for the appendix figure),
``eval_<mode>.json`` (per-item outcomes), ``table.csv``, ``figures/sweep.html`` and
``figures/deltas.html``. Runs resume: a finished run of the sweep is read back, not retrained.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
from dataclasses import dataclass, field

import pandas as pd
from transformers import PreTrainedModel

from mathcircuits.evaluation import ARITHMETIC, EvalResult, EvalSettings, compare_table
from mathcircuits.finetune import Mode, build_sft_dataset, compare_sft, load_tuned, split_validation
from mathcircuits.patching import KeyComponents, PatchingResult, SelectionConfig, select_key_components
from mathcircuits.pipeline.config import fingerprint
from mathcircuits.pipeline.context import Context, StageSummary, TableRow, save_csv, save_dataset
from mathcircuits.pipeline.stages.evaluate import evaluate_one
from mathcircuits.pipeline.stages.finetune import arithmetic_pairs
from mathcircuits.viz import save_figure, sft_delta_bars, sft_sweep_curves

__all__ = ["CompareSummary", "run"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompareSummary(StageSummary):
    """Data sizes, each mode's selected rate and the comparison table."""

    skipped: str | None = None
    train_pairs: int = 0
    validation_pairs: int = 0
    test_pairs: int = 0
    selected: dict[str, float] = field(default_factory=dict)
    table: list[TableRow] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        if self.skipped:
            return [f"  skipped: {self.skipped}"]
        out = [f"  pairs: train {self.train_pairs}, validation {self.validation_pairs}, test {self.test_pairs}"]
        out += [f"  {mode:<14} selected lr {lr:g}" for mode, lr in self.selected.items()]
        cols = ["model", ARITHMETIC, f"{ARITHMETIC} Δ", f"{ARITHMETIC} Δ low", f"{ARITHMETIC} Δ high"]
        df = pd.DataFrame(self.table)
        if set(cols) <= set(df.columns):
            out += ["  " + line for line in df[cols].round(1).to_string(index=False).splitlines()]
        return out


def _ranking(ctx: Context, modes: tuple[Mode, ...], key: KeyComponents) -> list[tuple[int, int]]:
    ks = [m.top_k for m in modes if m.top_k is not None]
    if not ks:
        return []
    topk = SelectionConfig(rule="topk", k=max(ks), mlp_k=0)
    chosen = select_key_components(PatchingResult.load(ctx.paths.patching("all")), topk)
    order = sorted(range(len(chosen.heads)), key=lambda i: -chosen.head_scores[i]) if chosen.head_scores else None
    return [chosen.heads[i] for i in order] if order else list(chosen.heads)


def run(ctx: Context) -> CompareSummary:
    """Train every mode at every rate, select on validation, evaluate the selected models on test items.

    Args:
        ctx: the run context.

    Returns:
        The stage summary.
    """
    c, f, e, paths = ctx.config.compare, ctx.config.finetune, ctx.config.evaluation, ctx.paths
    if not c.enabled:
        return CompareSummary(skipped="compare.enabled is false")
    key = KeyComponents.load(paths.key_components)
    key.check_model(ctx.model.spec)
    tok = ctx.model.tokenizer
    train = arithmetic_pairs(ctx, f.train_pairs_per_template, f.seed + 101)
    seen = set(train["prompt"])
    test = arithmetic_pairs(ctx, e.heldout_pairs_per_template, f.seed + 202).filter(lambda r: r["prompt"] not in seen)
    pool = arithmetic_pairs(ctx, e.heldout_pairs_per_template, f.seed + 303).filter(lambda r: r["prompt"] not in seen)
    val = split_validation(pool, test, c.validation_pairs, seed=f.seed)
    for split, ds in (("train", train), ("validation", val), ("test", test)):
        save_dataset(ds, paths.compare_pairs(split))
    d = ctx.config.to_dict()
    settings = fingerprint(d["compare"], d["finetune"], d["data"], d["model"], key.to_dict())
    stamp = paths.compare_settings
    if paths.compare_runs.exists() and (ctx.force or not stamp.exists() or stamp.read_text() != settings):
        shutil.rmtree(paths.compare_runs)  # runs of other settings must not be reused
    paths.compare_runs.mkdir(parents=True, exist_ok=True)
    stamp.write_text(settings)

    def fresh() -> PreTrainedModel:
        return ctx.hf_model()[0]

    cmp = compare_sft(
        fresh,
        tok,
        build_sft_dataset(tok, train, target="answer"),
        val,
        key,
        paths.compare_runs,
        modes=c.modes,
        learning_rates=c.learning_rates,
        config=f.sft("precise", ctx.progress),
        head_ranking=_ranking(ctx, c.modes, key),
        seed=c.random_seed,
        model_name=ctx.model.spec.name,
    )
    cmp.save(paths.comparison)
    sweep = cmp.to_dataframe()
    save_csv(sweep, paths.compare_sweep)
    results: dict[str, EvalResult] = {}
    for mode in cmp.modes:
        run = cmp.run(mode)
        model = load_tuned(fresh, run)
        res = evaluate_one(ctx, model, tok, str(mode), test)
        res = dataclasses.replace(
            res, settings=dataclasses.replace(res.settings or EvalSettings(), learning_rate=run.learning_rate)
        )
        res.save(paths.compare_eval(str(mode)))
        results[str(mode)] = res
        del model
    extra = {
        "learning rate": {str(m): (math.nan if m.kind == "base" else cmp.selected[str(m)]) for m in cmp.modes},
        "tuned params": {str(m): cmp.run(m).n_trainable for m in cmp.modes},
        "train samples/s": {str(m): cmp.run(m).samples_per_second for m in cmp.modes},
        "validation %": {str(m): 100 * cmp.run(m).val_accuracy for m in cmp.modes},
    }
    table = compare_table(results, "base", extra_columns=extra)
    save_csv(table.rename_axis("model").reset_index(), paths.compare_table)
    files = [str(p) for p in (paths.comparison, paths.compare_sweep, paths.compare_table)]
    files += [str(p) for p in save_figure(sft_sweep_curves(sweep), paths.compare_figure("sweep"))]
    files += [str(p) for p in save_figure(sft_delta_bars(table), paths.compare_figure("deltas"))]
    return CompareSummary(
        train_pairs=len(train),
        validation_pairs=len(val),
        test_pairs=len(test),
        selected=dict(cmp.selected),
        table=table.rename_axis("model").reset_index().round(3).to_dict(orient="records"),
        files=files,
    )
