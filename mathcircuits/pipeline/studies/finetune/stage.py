"""Stage ``finetune``: precise SFT of the key components vs full SFT, same data and settings (paper §5).

Training pairs are generated fresh (own seed, the finetune section's operand range); the held-out
arithmetic set uses another seed and drops every pair whose fact ``(operation, a, b)`` occurs in training,
in any template (deduplicating by prompt string kept facts trained in another wording). Modes, one
definition of "precise" everywhere: ``precise`` (key heads), ``precise+mlp`` (key heads and key MLPs),
``full``, and ``precise@K`` / ``precise@K+mlp`` (the top-K heads by path-patching effect, without / with
the key MLPs) for the paper's ablation on the number of tuned heads (Table 2). Under ``kv_policy: group``
a key head's K/V slice changes its whole KV group: the summary counts those non-key heads
(``kv-shared heads``). Each mode trains in ``finetune/<mode>/`` with checkpoints, so an interrupted run
resumes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from mathcircuits.data import GenerationConfig, PairSet, drop_facts, generate_pairs
from mathcircuits.data.facts import facts_of
from mathcircuits.finetune import Mode, build_sft_dataset, train_sft
from mathcircuits.finetune.matched import kv_shared_heads
from mathcircuits.models import Head
from mathcircuits.patching import KeyComponents, PatchingResult, SelectionConfig, select_key_components
from mathcircuits.pipeline.context import Context, StageSummary, save_dataset

__all__: list[str] = []


@dataclass(frozen=True)
class TrainingBrief:
    """One mode's fine-tuning, in brief: the heads and MLPs tuned (``"all"`` for full SFT), the non-key heads whose
    K/V changed through a shared KV group, sizes and how training went."""

    heads: int | Literal["all"]
    mlps: int | Literal["all"]
    kv_shared_heads: int
    n_trainable: int
    n_model_params: int
    steps: int
    train_loss: float
    samples_per_second: float
    runtime_s: float
    resumed_from: str | None


@dataclass(frozen=True)
class FinetuneSummary(StageSummary):
    """Data sizes and, per mode, what was tuned and how training went."""

    skipped: str | None = None
    train_pairs: int = 0
    heldout_pairs: int = 0
    key_heads: list[Head] = field(default_factory=list)
    key_mlps: list[int] = field(default_factory=list)
    runs: dict[str, TrainingBrief] = field(default_factory=dict)

    def lines(self) -> list[str]:
        if self.skipped:
            return [f"  skipped: {self.skipped}"]
        out = [f"  train pairs {self.train_pairs}, held-out pairs {self.heldout_pairs}"]
        out += [
            f"  {mode:<16} heads={r.heads:<4} MLPs={r.mlps:<3} kv-shared heads={r.kv_shared_heads:<3} "
            f"tuned params={r.n_trainable:<10} steps={r.steps:<4} loss={r.train_loss}"
            for mode, r in self.runs.items()
        ]
        return out


def arithmetic_pairs(ctx: Context, per_template: int, seed: int) -> PairSet:
    """Arithmetic pairs of the data section's operations and plain templates, with the finetune operand range.

    Shared by this stage and the ``compare`` stage (training, held-out and validation pairs, by seed).
    """
    f, d = ctx.config.finetune, ctx.config.data
    ids = ctx.arithmetic_template_ids()
    cfg = GenerationConfig(
        operations=d.operations,
        template_ids=ids,
        n_per_template=per_template,
        operand_range=f.operand_range,
        fewshot=d.fewshot,
        fewshot_operations=d.fewshot_operations,
        seed=seed,
    )
    return generate_pairs(ctx.model.tokenizer, ctx.templates(), cfg)


def mode_components(ctx: Context, mode: Mode, key: KeyComponents) -> KeyComponents | None:
    """The key components a mode tunes (None for full SFT).

    ``precise@K`` reads ``identify/patching_all.pt``.
    """
    if mode.kind == "full":
        return None
    if mode.top_k is None:  # precise: the key heads only; precise+mlp: and the key MLPs
        return key if mode.mlps else dataclasses.replace(key, mlps=(), mlp_scores=())
    overall = PatchingResult.load(ctx.paths.patching("all"))
    chosen = select_key_components(overall, SelectionConfig(rule="topk", k=mode.top_k, mlp_k=len(key.mlps)))
    return chosen if mode.mlps else dataclasses.replace(chosen, mlps=(), mlp_scores=())


def run(ctx: Context) -> FinetuneSummary:
    """Precise SFT of the key components and full SFT, same data and settings."""
    f, e, paths = ctx.config.finetune, ctx.config.evaluation, ctx.paths
    if not f.enabled:
        return FinetuneSummary(skipped="finetune.enabled is false")
    key = KeyComponents.load(paths.key_components)
    key.check_model(ctx.model.spec)
    train = arithmetic_pairs(ctx, f.train_pairs_per_template, f.seed + 101)
    heldout = arithmetic_pairs(ctx, e.heldout_pairs_per_template, f.seed + 202)
    heldout = drop_facts(heldout, facts_of(train))  # no trained fact, in any wording
    save_dataset(train, paths.train_pairs)
    save_dataset(heldout, paths.heldout_pairs)
    components = {mode: mode_components(ctx, mode, key) for mode in f.modes}
    runs: dict[str, TrainingBrief] = {}
    for mode in f.modes:
        out = paths.mode(mode)  # checkpoints here are of these settings: the runner cleared the folder otherwise
        out.mkdir(parents=True, exist_ok=True)
        model, tok = ctx.hf_model()
        resume = bool(paths.checkpoints(mode))
        _, result = train_sft(
            model,
            tok,
            build_sft_dataset(tok, train, target="answer"),
            out,
            key=components[mode],
            config=f.sft(mode, ctx.progress),
            resume_from_checkpoint=True if resume else None,
            model_name=ctx.model.spec.name,
        )
        runs[str(mode)] = TrainingBrief(
            heads=len(components[mode].heads) if components[mode] is not None else "all",
            mlps=len(components[mode].mlps) if components[mode] is not None else "all",
            kv_shared_heads=len(kv_shared_heads(result.slices)) if result.slices is not None else 0,
            n_trainable=result.n_trainable,
            n_model_params=result.n_model_params,
            steps=result.global_step,
            train_loss=round(result.train_loss, 4),
            samples_per_second=round(result.samples_per_second, 3),
            runtime_s=round(result.runtime_s, 1),
            resumed_from=result.resumed_from,
        )
    return FinetuneSummary(
        train_pairs=len(train),
        heldout_pairs=len(heldout),
        key_heads=list(key.heads),
        key_mlps=list(key.mlps),
        runs=runs,
    )
