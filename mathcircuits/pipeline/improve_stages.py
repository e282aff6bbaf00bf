"""Pipeline stages that improve the model: finetune (precise vs full SFT) and evaluate.

Training data are arithmetic pairs generated fresh (their own seed, a wider
operand range than identification); the held-out arithmetic set is generated
with another seed and every prompt that also occurs in training is removed.
Benchmarks come from test files only, never used for training here.

Modes: ``precise`` (the selected key components), ``full`` (every parameter),
and ``precise@K`` / ``precise@K+mlp`` — the top-K heads by path-patching effect
(plus the key MLPs), for the paper's ablation on the number of tuned heads
(Table 2), e.g. ``modes: [precise@8, precise@16, precise@32, precise@32+mlp, full]``.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from mathcircuits.pipeline.config import fingerprint
from mathcircuits.pipeline.stages import Context, _save_csv, _save_dataset, _templates

__all__ = ["STAGES", "stage_finetune", "stage_evaluate"]

log = logging.getLogger(__name__)


def _pairs(ctx: Context, per_template: int, seed: int) -> Any:
    from mathcircuits.data import GenerationConfig, generate_pairs

    f, d = ctx.config.finetune, ctx.config.data
    tpl_ids = tuple(t.id for s in _templates(ctx) for t in s.templates if t.operation in d.operations and t.form not in ("time_span", "accumulation"))
    cfg = GenerationConfig(operations=d.operations, template_ids=tpl_ids, n_per_template=per_template, operand_range=tuple(f.operand_range), fewshot=d.fewshot, seed=seed)
    return generate_pairs(ctx.model.tokenizer, _templates(ctx), cfg)


def stage_finetune(ctx: Context) -> dict[str, Any]:
    """Precise SFT of the key components and full SFT, same data and settings."""
    from mathcircuits.finetune import SFTConfig, build_sft_dataset, train_sft
    from mathcircuits.patching import KeyComponents

    f, e = ctx.config.finetune, ctx.config.evaluation
    if not f.enabled:
        return {"skipped": "finetune.enabled is false"}
    key = KeyComponents.load(ctx.path("identify", "key_components.json"))
    key.check_model(ctx.model.spec)
    train = _pairs(ctx, f.train_pairs_per_template, f.seed + 101)
    heldout = _pairs(ctx, e.heldout_pairs_per_template, f.seed + 202)
    seen = set(train["prompt"])
    heldout = heldout.filter(lambda r: r["prompt"] not in seen)
    _save_dataset(train, ctx.path("finetune", "train_pairs"))
    _save_dataset(heldout, ctx.path("finetune", "heldout_pairs"))
    summary: dict[str, Any] = {"train_pairs": len(train), "heldout_pairs": len(heldout), "key_heads": [list(h) for h in key.heads], "key_mlps": list(key.mlps), "runs": {}}
    settings = fingerprint(ctx.config.to_dict()["finetune"], ctx.config.to_dict()["data"], ctx.config.to_dict()["model"], key.to_dict())
    mode_keys = {mode: _mode_key(ctx, mode, key) for mode in f.modes}  # refuse unknown modes before training
    for mode in f.modes:
        out = ctx.path("finetune", mode)
        stamp = out / ".settings"
        if out.exists() and (ctx.force or not stamp.exists() or stamp.read_text() != settings):
            shutil.rmtree(out)  # checkpoints of other settings must not be resumed
        out.mkdir(parents=True, exist_ok=True)
        stamp.write_text(settings)
        model, tok = _hf(ctx)
        sft = build_sft_dataset(tok, train, target="answer")
        cfg = SFTConfig(
            mode="full" if mode == "full" else "precise", learning_rate=f.lr, batch_size=f.batch_size, micro_batch_size=f.micro_batch_size, epochs=f.epochs,
            max_steps=f.max_steps if f.max_steps > 0 else -1, warmup_ratio=f.warmup_ratio, weight_decay=f.weight_decay,
            kv_policy=f.kv_policy, include_mlps=f.include_mlps, seed=f.seed, save_steps=f.save_steps, progress_bar=ctx.progress,
        )
        resume = any(out.glob("checkpoint-*"))
        _, result = train_sft(model, tok, sft, out, key=mode_keys[mode], config=cfg, resume_from_checkpoint=True if resume else None, model_name=ctx.model.spec.name)
        summary["runs"][mode] = {
            "heads": len(mode_keys[mode].heads) if mode_keys[mode] is not None else "all",
            "n_trainable": result.n_trainable, "n_model_params": result.n_model_params, "steps": result.global_step,
            "train_loss": round(result.train_loss, 4), "samples_per_second": round(result.samples_per_second, 3),
            "runtime_s": round(result.runtime_s, 1), "resumed_from": result.resumed_from,
        }
    return summary


def _mode_key(ctx: Context, mode: str, key: Any) -> Any:
    """The key components a mode tunes (None for full SFT)."""
    from mathcircuits.patching import PatchingResult, select_key_components

    if mode == "full":
        return None
    if mode == "precise":
        return key
    if mode.startswith("precise@"):
        spec = mode.split("@", 1)[1]
        with_mlp = spec.endswith("+mlp")
        try:
            k = int(spec.removesuffix("+mlp"))
        except ValueError:
            k = 0
        if k > 0:
            overall = PatchingResult.load(ctx.path("identify", "patching_all.pt"))
            chosen = select_key_components(overall, rule="topk", k=k, mlp_k=len(key.mlps), source={"mode": mode})
            return chosen if with_mlp else type(chosen)(**{**chosen.__dict__, "mlps": (), "mlp_scores": ()})
    raise ValueError(f"finetune mode {mode!r} is unknown. Fix: use 'precise', 'full', 'precise@K' or 'precise@K+mlp' (K heads, e.g. precise@16).")


def _hf(ctx: Context) -> Any:
    """A plain HF model on the configured device and dtype (the hooked model's weights stay untouched)."""
    import torch

    from mathcircuits.models import load_hf_model

    m = ctx.config.model
    return load_hf_model(m.source, dtype=getattr(torch, m.dtype), device=m.device)


def _load_tuned(ctx: Context, mode: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    from mathcircuits.finetune import HeadSliceAdapter

    final = ctx.path("finetune", mode, "final")
    if not final.exists():
        raise FileNotFoundError(f"{final} is missing. Fix: run the finetune stage (mathcircuits finetune).")
    if mode != "full":
        base, _ = _hf(ctx)
        return HeadSliceAdapter.from_pretrained(base, final).merge_and_unload()
    m = ctx.config.model
    return AutoModelForCausalLM.from_pretrained(str(final), dtype=getattr(torch, m.dtype)).to(m.device).eval()


def stage_evaluate(ctx: Context) -> dict[str, Any]:
    """Base vs tuned models: held-out arithmetic accuracy and benchmark accuracy, as a Table-1-style table."""
    import torch

    from mathcircuits.data import score_pairs
    from mathcircuits.data.word_problems import default_benchmark_root
    from mathcircuits.evaluation import compare_table, evaluate_model
    from mathcircuits.finetune import SFTResult

    e = ctx.config.evaluation
    if not e.enabled:
        return {"skipped": "evaluation.enabled is false"}
    ft = ctx.path("finetune", ".done.json")
    modes = [m for m in ctx.config.finetune.modes if ctx.path("finetune", m, "final").exists()] if ft.exists() else []
    heldout = ctx.load_dataset("finetune", "heldout_pairs") if modes else None
    root = Path(e.root) if e.root else default_benchmark_root()
    benches = [b for b in e.benchmarks if root is not None]
    if root is None and e.benchmarks:
        log.warning("no benchmark folder found (set MATHCIRCUITS_BENCHMARKS or evaluation.root): only held-out arithmetic is evaluated")
    results, arith, speed, tuned = {}, {}, {}, {}
    for label in ["base", *modes]:
        model, tok = _hf(ctx) if label == "base" else (_load_tuned(ctx, label), ctx.model.tokenizer)
        if heldout is not None:

            def logits(t: torch.Tensor, m: Any = model) -> torch.Tensor:
                return m(t).logits

            scored = score_pairs(logits, heldout, device=ctx.config.model.device)
            arith[label] = 100.0 * sum(scored["correct"]) / len(scored)
        if benches:
            res = evaluate_model(model, tok, benches, label, path=root, limit=e.limit, n_shot=e.n_shot, max_new_tokens=e.max_new_tokens, progress=ctx.progress)
            res.save(ctx.path("evaluate", f"eval_{label}.pt"))
            results[label] = res
        if label != "base":
            r = SFTResult.load(ctx.path("finetune", label, "sft_result.json"))
            speed[label], tuned[label] = round(r.samples_per_second, 2), r.n_trainable
        else:
            speed[label], tuned[label] = None, 0
        del model
    extra = {"held-out arithmetic %": arith, "train samples/s": speed, "tuned params": tuned}
    if results:
        table = compare_table(results, "base", extra_columns=extra).rename_axis("model").reset_index()
    else:
        import pandas as pd

        table = pd.DataFrame({"model": list(arith), **{k: [v.get(l) for l in arith] for k, v in extra.items()}})
    _save_csv(table, ctx.path("evaluate", "table.csv"))
    return {"table": table.round(2).to_dict(orient="records")}


STAGES = {
    "finetune": (stage_finetune, ("finetune", "evaluation", "data"), ("identify",)),
    "evaluate": (stage_evaluate, ("evaluation",), ("finetune",)),
}
