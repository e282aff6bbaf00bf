"""The device check's rows: each stage through its public API on one shape, bf16 beside float32."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from gpu_check_models import build_hf, build_pair, floor_per_pair, make_pairs, mean_positions, mlp_rows
from gpu_check_table import Check, Row, rel_diff

from mathcircuits.stats import Uncertainty

ROOT = Path(__file__).resolve().parent.parent
RESERVE_S = 240  # seconds kept for the rows after the 7B shape's optional float32 twins (fine-tuning ... Llama-3)


def run_tiny_pipeline(device: str, dry: bool, workdir: Path) -> dict[str, Any]:
    """``mathcircuits run`` on configs/tiny.yaml with ``model.device`` set, in a subprocess."""
    import yaml

    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["model"]["device"] = device
    path = workdir / "tiny-device.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "mathcircuits.cli", "run", "--config", str(path), "--out", str(workdir / "run"),
           "--quiet"]  # fmt: skip
    if dry:  # the dry run stops after the first stages that load the model on the device (the test's time)
        cmd += ["--only", "data", "identify"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise RuntimeError(f"mathcircuits run exited {proc.returncode}: " + " | ".join(tail))
    return {"stages": "data, identify" if dry else "all", "command": " ".join(cmd[1:])}


def run_shape_rows(check: Check, tok: Any, name: str, shape: dict[str, int], device: str, args: Any,
                   full: bool) -> None:  # fmt: skip
    """The identifying and analysing stages on one shape: bf16 first, float32 beside it for agreement."""
    from mathcircuits.ablation import knockout_curve
    from mathcircuits.analysis import attention_by_role, mlp_probes
    from mathcircuits.circuit import discover_circuit, faithfulness
    from mathcircuits.numbers import mod_probes, number_contexts, number_states
    from mathcircuits.patching import compare_rankings, path_patch

    big = device == "cuda"
    models = check.row("build fp32 + bf16 copy", name, "both", lambda r: build_pair(tok, shape, device, name),
                       est_s=40 if big else 0)  # fmt: skip
    pairs = check.row("data: generate_pairs", name, "-",
                      lambda r: make_pairs(tok, args.pairs * 2, fewshot=not args.dry_run))  # fmt: skip
    if pairs is not None:
        scan, circuit_pairs = pairs.select(range(args.pairs)), pairs.select(range(args.pairs, len(pairs)))
    else:
        scan = circuit_pairs = None
    have = (("models", models), ("pairs", pairs))
    res: dict[str, Any] = {}

    def exact(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            t = time.perf_counter()
            result = path_patch(models[dtype], scan, method="exact", keep_per_pair=True)
            check._sync()
            r.per_pair_s = (time.perf_counter() - t) / len(scan)
            pos = mean_positions(scan)
            if not args.dry_run:  # the floor assumes a GPU's peak: a CPU's tiny shapes are no measure of it
                r.floor_per_pair_s = floor_per_pair(shape, pos, dtype)
                r.note = f"{r.per_pair_s / r.floor_per_pair_s:.1f}x the floor"
            r.extra.update(pairs=len(scan), answer_positions=round(pos, 2), mlp_rows=mlp_rows(shape["layers"],
                           shape["heads"]), senders=shape["layers"] * (shape["heads"] + 1))  # fmt: skip
            return result

        return fn

    def timed_exact(dtype: str) -> Any:
        # a warm-up on 2 pairs first (kernels, the run-time checks of the fast paths), so the timed row is the scan
        check.row("exact warm-up (2 pairs)", name, dtype,
                  lambda r: path_patch(models[dtype], scan.select(range(2)), method="exact"), needs=have,
                  est_s=20 if big else 0)  # fmt: skip
        return check.row("exact scan", name, dtype, exact(dtype), needs=have, est_s=30 if big else 0)

    res["exact16"] = timed_exact("bfloat16")

    def profile(r: Row) -> None:
        """Where the bf16 scan's time goes: the operations with the largest device time, on 4 pairs."""
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        sub = scan.select(range(min(4, len(scan))))
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with torch_profile(activities=activities) as prof:
            path_patch(models["bfloat16"], sub, method="exact")
            check._sync()
        events = prof.key_averages()
        attr = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
        top = sorted(events, key=lambda e: getattr(e, attr, 0), reverse=True)[:15]
        total = sum(getattr(e, attr, 0) for e in events) or 1
        r.extra["profile"] = [
            {"op": e.key[:80], "ms": round(getattr(e, attr, 0) / 1e3, 2),
             "share": round(getattr(e, attr, 0) / total, 3), "calls": e.count} for e in top
        ]  # fmt: skip
        r.note = "; ".join(f"{p['op'][:40]} {p['share']:.0%}" for p in r.extra["profile"][:4])

    check.row("exact scan profile (4 pairs)", name, "bfloat16", profile, needs=(*have, ("exact", res["exact16"])),
              est_s=15 if big else 0)  # fmt: skip
    more = make_pairs(tok, args.scale_pairs, seed=1, fewshot=not args.dry_run) if args.scale_pairs else None

    def scaled(r: Row) -> Any:
        t = time.perf_counter()
        result = path_patch(models["bfloat16"], more, method="exact", batch_size=64)
        check._sync()
        r.per_pair_s = (time.perf_counter() - t) / len(more)
        r.note = f"{len(more)} pairs, batch_size 64"
        if not args.dry_run:
            r.floor_per_pair_s = floor_per_pair(shape, mean_positions(more), "bfloat16")
            r.note += f"; {r.per_pair_s / r.floor_per_pair_s:.1f}x the floor"
        return result

    if more is not None:
        check.row(f"exact scan ({len(more)} pairs)", name, "bfloat16", scaled, needs=have, est_s=15 if big else 0)
    res["exact32"] = timed_exact("float32")

    def exact_vs_fp32(row: Row) -> None:
        row.agree_fp32 = rel_diff(res["exact16"].per_pair_heads, res["exact32"].per_pair_heads)
        row.extra["agree_fp32_mlps"] = rel_diff(res["exact16"].per_pair_mlps, res["exact32"].per_pair_mlps)
        row.extra["rankings_vs_fp32"] = compare_rankings(res["exact16"], res["exact32"], k=10)

    check.compare("exact scan", name, "bfloat16", exact_vs_fp32, res["exact16"], res["exact32"])

    def reference(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            sub = scan.select(range(args.ref_pairs))
            ref = path_patch(models[dtype], sub, method="reference", keep_per_pair=True)
            ex = res["exact32" if dtype == "float32" else "exact16"]
            r.agree_ref = rel_diff(ex.per_pair_heads[: len(sub)], ref.per_pair_heads)
            r.extra["agree_ref_mlps"] = rel_diff(ex.per_pair_mlps[: len(sub)], ref.per_pair_mlps)
            r.extra["max_abs_diff_heads"] = float((ex.per_pair_heads[: len(sub)] - ref.per_pair_heads).abs().max())
            r.note = f"exact vs reference on {len(sub)} pairs ({shape['layers'] * (shape['heads'] + 1)} forwards)"
            return ref

        return fn

    check.row("reference scan", name, "float32", reference("float32"), needs=(*have, ("exact fp32", res["exact32"])),
              est_s=90 if big else 0)  # fmt: skip

    def knockout(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            patching = res["exact16" if dtype == "bfloat16" else "exact32"]
            k = knockout_curve(models[dtype], scan, patching, max_k=args.max_k, n_random=2, seed=0)
            r.extra["ranked_accuracy"] = k.ranked_accuracy
            r.note = "random weights: accuracies are ~0 (no correctness filter)"
            return k

        return fn

    res["knock16"] = check.row("knockout + random ctl", name, "bfloat16", knockout("bfloat16"),
                               needs=(*have, ("exact bf16", res["exact16"])), est_s=30 if big else 0,
                               optional=not full)  # fmt: skip

    def circuit(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            n = len(circuit_pairs) // 2
            disc, ev = circuit_pairs.select(range(n)), circuit_pairs.select(range(n, 2 * n))
            # the dry run: one sender per answer position and two receiver kinds (a query, a KV group), for time
            size = dict(logits_top_k=2) if big else dict(logits_top_k=1, receivers=("q", "v"))
            found = discover_circuit(models[dtype], disc, depth=1, top_k=1, uncertainty=Uncertainty(n_boot=50),
                                     batch_size=8, max_seconds=60 if big else None, **size)  # fmt: skip
            faith = faithfulness(models[dtype], ev, found, ablations=("resample",), points=3, n_random=2,
                                 completeness_sets=1, uncertainty=Uncertainty(n_boot=50))  # fmt: skip
            r.extra.update(nodes=len(found.nodes) - 1, edges=len(found.edges), stopped=str(found.settings.stopped),
                           plateau_size=getattr(faith, "plateau_size", None), pairs=f"{n} + {n}")  # fmt: skip
            r.note = f"{len(found.nodes) - 1} nodes, {len(found.edges)} edges; faithfulness on {n} other pairs"
            return {(nd.kind, nd.layer, nd.head, nd.position) for nd in found.nodes}

        return fn

    res["circ16"] = check.row("circuit + faithfulness", name, "bfloat16", circuit("bfloat16"), needs=have,
                              est_s=90 if big else 0, optional=not full)  # fmt: skip
    if not full:
        return

    def attribution(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            # the screen differentiates a first-token metric: prob_change, compared with the exact scan of the same
            t = time.perf_counter()
            att = path_patch(models[dtype], scan, method="attribution", metric="prob_change", keep_per_pair=True)
            check._sync()
            r.per_pair_s = (time.perf_counter() - t) / len(scan)
            ex = path_patch(models[dtype], scan, method="exact", metric="prob_change", keep_per_pair=True)
            r.agree_ref = rel_diff(att.per_pair_heads, ex.per_pair_heads)
            r.extra["rankings_vs_exact"] = compare_rankings(att, ex, k=10)
            r.note = (f"prob_change; vs ref = vs the exact scan (a first-order screen); Spearman "
                      f"{r.extra['rankings_vs_exact']['spearman_heads']:.2f}; s/pair: the screen alone")  # fmt: skip
            return att

        return fn

    att = {d: check.row("attribution scan", name, d, attribution(d), needs=(*have, ("exact", res["exact16"])),
                        est_s=20 if big else 0) for d in ("bfloat16", "float32")}  # fmt: skip

    def att_vs_fp32(row: Row) -> None:
        row.agree_fp32 = rel_diff(att["bfloat16"].per_pair_heads, att["float32"].per_pair_heads)

    check.compare("attribution scan", name, "bfloat16", att_vs_fp32, att["bfloat16"], att["float32"])

    def top_heads() -> list[tuple[int, int]]:
        return [(l, h) for l, h, _ in res["exact16"].top_heads(4)]

    def roles(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            out = attention_by_role(models[dtype], scan, top_heads())
            probes = mlp_probes(models[dtype], scan)
            r.note = "attention by role (top 4 heads) + MLP probes"
            return out, probes

        return fn

    an = {d: check.row("attention + MLP probes", name, d, roles(d), needs=(*have, ("exact bf16", res["exact16"])),
                       est_s=20 if big else 0) for d in ("bfloat16", "float32")}  # fmt: skip

    def roles_vs_fp32(row: Row) -> None:
        row.agree_fp32 = float((an["bfloat16"][0].shares - an["float32"][0].shares).abs().max())
        lens = (an["bfloat16"][1].lens_prob - an["float32"][1].lens_prob).abs().max()
        row.extra["lens_prob_max_abs_diff"] = float(lens)
        row.note += "; vs fp32: largest attention-share difference"

    check.compare("attention + MLP probes", name, "bfloat16", roles_vs_fp32, an["bfloat16"], an["float32"])

    def numbers(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            from mathcircuits.data import load_templates

            contexts = number_contexts(tok, load_templates(), ("add",), 2)
            states = number_states(models[dtype], range(100), contexts)
            L = shape["layers"]
            probes = mod_probes(
                states, periods=(2, 5, 10), folds=2, uncertainty=Uncertainty(n_boot=50), depths=[L // 2, L]
            )
            r.note = f"number states 0-99 in {len(contexts)} contexts; mod-T probes at depths {L // 2}, {L}"
            r.extra["probe"] = type(probes).__name__
            return states

        return fn

    nums = {d: check.row("numbers: states+probes", name, d, numbers(d), needs=have, est_s=30 if big else 0)
            for d in ("bfloat16", "float32")}  # fmt: skip

    def nums_vs_fp32(row: Row) -> None:
        row.agree_fp32 = rel_diff(nums["bfloat16"].states, nums["float32"].states)

    check.compare("numbers: states+probes", name, "bfloat16", nums_vs_fp32, nums["bfloat16"], nums["float32"])

    # lower priority: the float32 knockout and circuit, and the bf16 reference, if the rows after them still fit
    reserve = RESERVE_S if big and not args.extended else 0
    k32 = check.row("knockout + random ctl", name, "float32", knockout("float32"), optional=True,
                    needs=(*have, ("exact fp32", res["exact32"])), est_s=40 + reserve if big else 0)  # fmt: skip

    def knock_vs_fp32(row: Row) -> None:
        row.agree_fp32 = max(abs(a - b) for a, b in zip(res["knock16"].ranked_accuracy, k32.ranked_accuracy))
        row.note += "; vs fp32: largest accuracy difference on the curve"

    check.compare("knockout + random ctl", name, "bfloat16", knock_vs_fp32, k32, res["knock16"])
    c32 = check.row("circuit + faithfulness", name, "float32", circuit("float32"), needs=have, optional=True,
                    est_s=120 + reserve if big else 0)  # fmt: skip

    def circ_vs_fp32(row: Row) -> None:
        row.agree_fp32 = 1 - len(c32 & res["circ16"]) / max(1, len(c32 | res["circ16"]))
        row.note += "; vs fp32: 1 - Jaccard of the node sets"

    check.compare("circuit + faithfulness", name, "bfloat16", circ_vs_fp32, c32, res["circ16"])
    check.row("reference scan", name, "bfloat16", reference("bfloat16"), needs=(*have, ("exact bf16", res["exact16"])),
              optional=True, est_s=60 + reserve if big else 0)  # fmt: skip
    check.write()
    models = None  # the closures above hold the models: release them before the next shape is built
    res.clear()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def run_finetune_rows(check: Check, tok: Any, name: str, shape: dict[str, int], device: str, fewshot: bool) -> None:
    """Precise SFT, LoRA on precise's parameter budget, and full SFT: a few AdamW steps each, samples/s."""
    from transformers import TrainerCallback

    from mathcircuits.finetune import SFTConfig, build_sft_dataset, head_slices, train_sft
    from mathcircuits.finetune.components import lora_rank_for_budget

    L, H = shape["layers"], shape["heads"]
    heads = sorted({(L - 1, 0), (L - 2, 1 % H), (L // 2, 3 % H), (L // 3, 2 % H), (0, H - 1)})
    mlps = sorted({L - 2, L - 1})
    pairs = make_pairs(tok, 64, seed=1, fewshot=fewshot)
    data = build_sft_dataset(tok, pairs).shuffle(seed=0)
    micro, warm, timed = 8, 1, 3
    budget_box: dict[str, int] = {}

    def mode_fn(mode: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            model = build_hf(tok, shape, torch.float32, device)  # float32 master weights (bf16 autocast on CUDA)
            slices = head_slices(model, heads, mlps=mlps)
            budget_box.setdefault("n", slices.n_tuned)
            rank, _ = lora_rank_for_budget(model, budget_box["n"])
            stamps: list[float] = []

            class Stamp(TrainerCallback):
                def on_step_end(self, a, state, control, **kw):  # noqa: ANN001
                    check._sync()
                    stamps.append(time.perf_counter())

            cfg = SFTConfig(mode=mode, micro_batch_size=micro, batch_size=micro, max_steps=warm + timed,
                            lora_rank=rank, logging_steps=10_000, save_final=False, progress_bar=False,
                            warmup_ratio=0.0, bf16=device == "cuda")  # fmt: skip
            with tempfile.TemporaryDirectory() as out:
                _, result = train_sft(model, tok, data, out, key=slices if mode == "precise" else None, config=cfg,
                                      callbacks=[Stamp()])  # fmt: skip
            sps = timed * micro / (stamps[-1] - stamps[warm - 1])
            r.extra.update(samples_per_s=sps, n_trainable=result.n_trainable, n_params=result.n_model_params,
                           lora_rank=rank if mode == "lora" else None, steps=f"{warm} warm-up + {timed} timed",
                           micro_batch=micro)  # fmt: skip
            r.note = (f"{sps:.1f} samples/s; {result.n_trainable:,} trainable of {result.n_model_params:,}"
                      + (f" (LoRA rank {rank})" if mode == "lora" else "")
                      + "; 1B shape: full AdamW SFT of 7B needs ~110 GB")  # fmt: skip
            del model
            return sps

        return fn

    for mode in ("precise", "lora", "full"):
        check.row(f"SFT {mode}", name, "bf16 amp" if device == "cuda" else "float32", mode_fn(mode),
                  est_s=45 if device == "cuda" else 0)  # fmt: skip
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()


def run_generation_rows(check: Check, tok: Any, name: str, shape: dict[str, int], device: str, fewshot: bool) -> None:
    """Greedy generation on a few held-out arithmetic items, bf16 beside float32 (the same weights)."""
    from mathcircuits.evaluation.generation import generate_greedy

    prompts = list(make_pairs(tok, 8, seed=2, fewshot=fewshot).prompts)
    texts: dict[str, list[str]] = {}

    def gen(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            model = build_hf(tok, shape, torch.float32, device)
            if dtype == "bfloat16":
                model = model.to(torch.bfloat16)
            out = generate_greedy(model, tok, prompts, max_new_tokens=8, batch_size=8)
            r.note = f"{len(prompts)} items, 8 new tokens each"
            texts[dtype] = out
            del model
            return out

        return fn

    for dtype in ("float32", "bfloat16"):
        check.row("generation", name, dtype, gen(dtype), est_s=40 if device == "cuda" else 0)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()

    def gen_vs_fp32(row: Row) -> None:
        row.agree_fp32 = 1 - sum(a == b for a, b in zip(texts["bfloat16"], texts["float32"])) / len(prompts)
        row.note += "; vs fp32: share of continuations that differ"

    check.compare("generation", name, "bfloat16", gen_vs_fp32, texts.get("bfloat16"), texts.get("float32"))
