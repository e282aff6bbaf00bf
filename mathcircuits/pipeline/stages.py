"""Pipeline stages: data → identify → validate (→ analyze → report → finetune → evaluate).

Stages talk only through the run directory: each reads what upstream stages
wrote and writes its own sub-folder, atomically, then a ``.done.json`` marker
with the fingerprint of its inputs (its config sections and its upstream
markers). A stage whose marker matches is skipped, so re-running a finished
run is a no-op and an interrupted run resumes at the first unfinished stage.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from mathcircuits._io import read_json, write_json
from mathcircuits.pipeline.config import RunConfig

__all__ = ["Context", "stage_data", "stage_identify", "stage_validate"]

log = logging.getLogger(__name__)


class Context:
    """The run directory, the config and a lazily loaded model shared by stages in one process."""

    def __init__(self, run_dir: Path, config: RunConfig, progress: bool = True, force: bool = False) -> None:
        self.run_dir = run_dir
        self.config = config
        self.progress = progress
        self.force = force
        self._model: Any = None

    @property
    def model(self) -> Any:
        if self._model is None:
            from mathcircuits.models import load_model

            m = self.config.model
            if m.threads:
                torch.set_num_threads(m.threads)
            self._model = load_model(m.source, device=m.device, dtype=getattr(torch, m.dtype))
        return self._model

    def path(self, *parts: str) -> Path:
        return self.run_dir.joinpath(*parts)

    def load_dataset(self, *parts: str):
        import datasets

        p = self.path(*parts)
        if not p.exists():
            raise FileNotFoundError(f"{p} is missing. Fix: run the stage that writes it first (mathcircuits run).")
        return datasets.load_from_disk(str(p))


def _save_dataset(ds: Any, path: Path) -> None:
    from mathcircuits._io import atomic_dir

    with atomic_dir(path) as tmp:
        ds.save_to_disk(str(tmp))


def _save_csv(df: Any, path: Path) -> None:
    from mathcircuits._io import atomic_path

    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)


def _templates(ctx: Context) -> list[Any]:
    from mathcircuits.data import load_templates

    files = ctx.config.data.template_files
    return load_templates(list(files) if files else None)


def stage_data(ctx: Context) -> dict[str, Any]:
    """Build the prompt pairs, score the model on them, keep the correct ones."""
    from mathcircuits.data import GenerationConfig, accuracy_table, filter_correct, generate_pairs, score_pairs

    d = ctx.config.data
    gen = GenerationConfig(
        operations=d.operations, template_ids=d.template_ids or None, n_per_template=d.n_per_template,
        operand_range=tuple(d.operand_range), fewshot=d.fewshot, multi_token_answers=d.multi_token_answers, seed=d.seed,
    )
    model = ctx.model
    pairs = generate_pairs(model.tokenizer, _templates(ctx), gen)
    scored = score_pairs(model, pairs, device=model.device, progress=ctx.progress)
    correct = filter_correct(scored) if d.keep_only_correct else scored
    table = accuracy_table(scored)
    _save_dataset(scored, ctx.path("data", "pairs_scored"))
    _save_dataset(correct, ctx.path("data", "pairs_correct"))
    _save_csv(table, ctx.path("data", "accuracy.csv"))
    per_op = table[table["template_id"] == "(all)"][["operation", "n", "accuracy", "mean_p_answer"]]
    return {"n_pairs": len(scored), "n_correct": len(correct), "accuracy_by_operation": per_op.to_dict(orient="records")}


def _select_pairs(ds: Any, operation: str | None, limit: int, seed: int = 0) -> Any:
    if operation is not None:
        ds = ds.filter(lambda r: r["operation"] == operation)
    ds = ds.shuffle(seed=seed)
    return ds.select(range(min(limit, len(ds))))


def stage_identify(ctx: Context) -> dict[str, Any]:
    """Path-patch every head and MLP per operation (with enough correct pairs) and overall; select key components."""
    from mathcircuits.patching import path_patch, select_key_components

    p, s = ctx.config.patching, ctx.config.selection
    correct = ctx.load_dataset("data", "pairs_correct")
    counts = {op: sum(1 for o in correct["operation"] if o == op) for op in ctx.config.data.operations}
    ops = [op for op, n in counts.items() if n >= p.min_pairs]
    if not ops:
        raise RuntimeError(
            f"no operation has at least {p.min_pairs} correct pairs (counts: {counts}). "
            "Fix: raise data.n_per_template, or lower patching.min_pairs."
        )
    summary: dict[str, Any] = {"correct_pairs": counts, "patched_operations": ops, "results": {}}
    used = []
    for op in ops:
        sub = _select_pairs(correct, op, p.max_pairs)
        used.append(sub)
        res = path_patch(ctx.model, sub, senders=p.senders, metric=p.metric, method=p.method, batch_size=p.batch_size, keep_per_pair=True, progress=ctx.progress)
        res.save(ctx.path("identify", f"patching_{op}.pt"))
        summary["results"][op] = {"n_pairs": res.n_pairs, "seconds": round(res.seconds, 2), "top_heads": [[l, h, round(e, 5)] for l, h, e in res.top_heads(10)]}
    import datasets

    both = datasets.concatenate_datasets(used)
    # the overall result is the pair-weighted mean over operations
    from mathcircuits.patching import PatchingResult

    per_op = [PatchingResult.load(ctx.path("identify", f"patching_{op}.pt")) for op in ops]
    first = per_op[0]
    heads = torch.cat([f.per_pair_heads for f in per_op])
    mlps = torch.cat([f.per_pair_mlps for f in per_op])
    overall = PatchingResult(
        head_effects=heads.mean(0), mlp_effects=mlps.mean(0), metric=first.metric, method=first.method, model=first.model,
        n_pairs=heads.shape[0], pair_ids=list(both["pair_id"]), operations=ops, clean_logit_mean=float("nan"),
        per_pair_heads=heads, per_pair_mlps=mlps, seconds=sum(f.seconds for f in per_op), settings=first.settings,
    )
    overall.save(ctx.path("identify", "patching_all.pt"))
    key = select_key_components(overall, rule=s.rule, threshold=s.threshold, k=s.k, z=s.z, max_k=s.max_k, mlp_k=s.mlp_k, source={"operations": ops, "data": asdict(ctx.config.data)})
    if not key.heads:
        key = select_key_components(overall, rule="topk", k=s.k, mlp_k=s.mlp_k, source={"operations": ops, "fallback": f"rule {s.rule} selected no head"})
    key.save(ctx.path("identify", "key_components.json"))
    _save_csv(overall.to_dataframe(), ctx.path("identify", "effects_all.csv"))
    summary.update(
        key_heads=[list(h) for h in key.heads], key_mlps=list(key.mlps), key_head_fraction=round(key.head_fraction, 4),
        rule=key.rule, top_heads=[[l, h, round(e, 5)] for l, h, e in overall.top_heads(10)],
    )
    return summary


def _transfer_sets(ctx: Context, correct: Any) -> dict[str, Any]:
    from mathcircuits.data import GenerationConfig, generate_pairs, word_problem_dataset
    from mathcircuits.data.word_problems import default_benchmark_root

    v, d = ctx.config.validation, ctx.config.data
    model = ctx.model
    sets: dict[str, Any] = {}
    for op in sorted(set(correct["operation"])):
        sets[f"{op} (identification templates, correct)"] = _select_pairs(correct, op, v.max_pairs)
    templates = _templates(ctx)
    if v.transfer_templates:
        extra = generate_pairs(model.tokenizer, templates, GenerationConfig(operations=("add",), template_ids=tuple(t.id for s in templates for t in s.templates if t.form in ("time_span", "accumulation")) or None, n_per_template=4, seed=d.seed + 1))
        sets["add word templates (time span, accumulation)"] = extra
    if v.transfer_multi_digit:
        multi = generate_pairs(model.tokenizer, templates, GenerationConfig(operations=("add",), template_ids=("add_eq_1",), operand_range=(10, 99), n_per_template=v.max_pairs, seed=d.seed + 2))
        sets["add two-digit operands"] = multi
    root = Path(v.word_problem_root) if v.word_problem_root else default_benchmark_root()
    if root is not None:
        for name in v.word_problem_sets:
            f = root / name / "test.json"
            if f.exists():
                sets[f"{name} word problems"] = word_problem_dataset(model.tokenizer, f, limit=v.word_problem_limit, fewshot=1)
    else:
        log.warning("no benchmark folder found: word-problem transfer skipped (set MATHCIRCUITS_BENCHMARKS)")
    return sets


def stage_validate(ctx: Context) -> dict[str, Any]:
    """Knockout curves (key vs random heads) and transfer to other data."""
    from mathcircuits.ablation import head_means, knockout_curve, transfer
    from mathcircuits.patching import KeyComponents, PatchingResult

    v = ctx.config.validation
    model = ctx.model
    key = KeyComponents.load(ctx.path("identify", "key_components.json"))
    key.check_model(model.spec)
    correct = ctx.load_dataset("data", "pairs_correct")
    ident = read_json(ctx.path("identify", ".done.json"))["summary"]
    summary: dict[str, Any] = {"knockout": {}}
    means_src = correct.filter(lambda r: r["operation"] in ident["patched_operations"])
    means = head_means(model, _select_pairs(means_src, None, 4 * v.max_pairs))
    means.save(ctx.path("validate", "head_means.pt"))
    for op in ident["patched_operations"]:
        res = PatchingResult.load(ctx.path("identify", f"patching_{op}.pt"))
        ko = knockout_curve(model, _select_pairs(correct, op, v.max_pairs), res, max_k=v.knockout_max_k, n_random=v.n_random, means=means, scope=v.scope, progress=ctx.progress)
        ko.save(ctx.path("validate", f"knockout_{op}.pt"))
        _save_csv(ko.to_dataframe(), ctx.path("validate", f"knockout_{op}.csv"))
        summary["knockout"][op] = {
            "baseline": ko.baseline_accuracy, "ranked_final": ko.ranked_accuracy[-1],
            "random_final_mean": float(ko.random_accuracy[:, -1].mean()), "random_final_std": float(ko.random_accuracy[:, -1].std()) if ko.random_accuracy.shape[0] > 1 else 0.0,
            "k": ko.ks[-1],
        }
    tr = transfer(model, _transfer_sets(ctx, correct), list(key.heads), means, n_random=v.n_random, scope=v.scope, progress=ctx.progress)
    tr.save(ctx.path("validate", "transfer.pt"))
    _save_csv(tr.to_dataframe(), ctx.path("validate", "transfer.csv"))
    summary["transfer"] = tr.rows
    return summary


def write_done(path: Path, fp: str, summary: dict[str, Any]) -> None:
    write_json(path, {"fingerprint": fp, "summary": summary})
