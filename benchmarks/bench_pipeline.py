"""Benchmark: what each study of a run cost, and every stage's fast path against its plain path.

    .venv/bin/python benchmarks/bench_pipeline.py --table runs/default     # per-study time and peak memory of a run
    .venv/bin/python benchmarks/bench_pipeline.py --time-run runs/default  # run configs/default.yaml and time it
    .venv/bin/python benchmarks/bench_pipeline.py --quick             # tiny random Llama: a smoke check (~1 min)
    .venv/bin/python benchmarks/bench_pipeline.py                     # the embedded model (SmolLM2-135M)
    .venv/bin/python benchmarks/bench_pipeline.py --pairs 64 --plain-pairs 16 --threads 1

**A run's costs.** ``--table DIR`` prints one row per study from the run folder's records: its state, the wall
seconds and peak memory its marker recorded (``mathcircuits status`` reads the same), and, when the run was timed
by ``--time-run``, the process's CPU seconds during the study. ``--time-run DIR`` runs ``mathcircuits run --config
CONFIG --out DIR`` (``--config``: configs/default.yaml; the models in the cache), reads the process's CPU time
(user + system, all threads, from ``/proc``) at each study's start and end line, writes them to
``DIR/logs/bench-times.json`` with the load average before and after, and prints the table and the whole run's
wall and CPU time. On a shared machine the CPU time is the figure to compare: the wall time grows with the load.

**Fast paths.** Stages (an *item* is a pair, or a pair × knockout point for knockout):

* ``scoring`` — :func:`mathcircuits.data.score_pairs` (teacher-forced answer tokens);
* ``patching forwards`` — the reference and counterfactual forwards of exact path patching
  (:func:`mathcircuits.patching.cache.last_position_caches`; ``share_prefix=False`` is the plain path);
* ``head means`` — :func:`mathcircuits.ablation.head_means` over the counterfactual prompts;
* ``knockout <ablation>`` — :class:`mathcircuits.ablation.KnockoutScorer` over a fixed list of head sets
  (the fast path reuses the clean prefix and the clean blocks below the lowest ablated layer; its first
  call's clean work is included in its time); ``fast=False`` is one full hooked forward per batch;
* ``attention`` / ``mlp probes`` — :func:`mathcircuits.analysis.attention_by_role` and
  :func:`mathcircuits.analysis.mlp_probes`;
* ``generation`` — :func:`mathcircuits.evaluation.generation.generate_greedy` on AddSub prompts as the evaluate stage
  builds them (``--gen-shots`` exemplars, ``--gen-max-new`` tokens, batch 8, stop at the answer); an item is
  one prompt. The fast path runs the shared exemplar prefix once (``prefix_cache=True``), the plain path
  left-pads and runs each whole prompt. Both run on the same ``--gen-items`` prompts; the difference is
  the largest first-step logit difference, and the row is followed by how many texts differ. The row
  ``generation 1st step`` times the first step alone (the prompt prefill, what the cache shortens).
  ``--generation-only`` runs just this row.

The plain path of scoring, head means and the analyses is the same library code inside
``mathcircuits.models.fast_paths(False)`` (every prefix-cached forward becomes the whole plain
forward, all logits). The plain path runs on the first ``--plain-pairs`` pairs only (it is slow; cost is
linear in pairs), so times are compared **per item**; the largest numeric difference is taken on the pairs
both paths ran. Prints one row per stage: items and seconds per item of each path, their ratio, the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _maxdiff(a: Any, b: Any) -> float:
    if isinstance(a, torch.Tensor):
        return float((a.float() - b.float()).abs().max()) if a.numel() else 0.0
    if isinstance(a, dict):
        return max((_maxdiff(a[k], b[k]) for k in a), default=0.0)
    return max((_maxdiff(x, y) for x, y in zip(a, b)), default=0.0)


def _cpu_seconds(pid: int) -> float:
    """A process's CPU time so far, user + system over all its threads (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_run(out: Path, config: Path, only: list[str] | None = None) -> dict[str, Any]:
    """Run ``mathcircuits run --config config --out out [--only …]``; record each study's CPU seconds and the load."""
    cmd = [sys.executable, "-m", "mathcircuits.cli", "run", "--config", str(config), "--out", str(out), "--quiet"]
    cmd += ["--only", *only] if only else []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    load0, t0 = os.getloadavg(), time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None
    cpu: dict[str, float] = {}
    started: dict[str, float] = {}
    last = 0.0
    for line in proc.stdout:
        sys.stdout.write(line)
        try:
            last = _cpu_seconds(proc.pid)
        except (OSError, IndexError, ValueError):  # the process has just ended
            pass
        if m := re.match(r"\[(\w+)\] (running|resuming) ", line):
            started[m.group(1)] = last
        elif (m := re.match(r"\[(\w+)\] done in ", line)) and m.group(1) in started:
            cpu[m.group(1)] = round(last - started[m.group(1)], 1)
    rc = proc.wait()
    record = {
        "command": " ".join(cmd),
        "exit_code": rc,
        "wall_s": round(time.perf_counter() - t0, 1),
        "cpu_s": round(last, 1),
        "cpu_s_per_study": cpu,
        "load_before": [round(x, 2) for x in load0],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    (out / "logs").mkdir(parents=True, exist_ok=True)
    name = "bench-times.json" if not only else f"bench-times-{'-'.join(only)}.json"
    (out / "logs" / name).write_text(json.dumps(record, indent=2) + "\n")
    return record


def run_table(out: Path) -> list[tuple[str, str, str, str, str]]:
    """Per study of the run folder: state, wall seconds, CPU seconds (when timed) and peak memory."""
    from mathcircuits.pipeline.config import RunConfig
    from mathcircuits.pipeline.paths import RunPaths
    from mathcircuits.pipeline.run import stage_status

    cfg = RunConfig.load(out / "config.yaml")
    timed = out / "logs" / "bench-times.json"
    cpu = json.loads(timed.read_text())["cpu_s_per_study"] if timed.is_file() else {}
    rows = []
    for name, state in stage_status(out, cfg, verify=False).items():
        if not RunPaths(out).marker(name).is_file():  # its record: a stage now stale still shows what it cost
            rows.append((name, state.state, "", "", ""))
            continue
        # the marker's own numbers, read plainly: a summary of another version still has them
        s = json.loads(RunPaths(out).marker(name).read_text())["summary"]
        peak = f"{s['peak_memory']['bytes'] / 2**20:,.0f} MiB" if s.get("peak_memory") else "not measured"
        c = f"{cpu[name]:.1f}" if name in cpu else ""
        rows.append((name, state.state, f"{s['seconds']:.1f}", c, peak))
    return rows


def print_table(out: Path) -> None:
    rows = run_table(out)
    print(f"{'study':<10} {'state':<8} {'wall s':>8} {'CPU s':>8} {'peak memory':>14}")
    for name, state, wall, cpu, peak in rows:
        print(f"{name:<10} {state:<8} {wall:>8} {cpu:>8} {peak:>14}")
    walls = [float(r[2]) for r in rows if r[2]]
    cpus = [float(r[3]) for r in rows if r[3]]
    print(f"{'stages':<10} {'':<8} {sum(walls):>8.1f} {sum(cpus) if cpus else '':>8}")
    timed = out / "logs" / "bench-times.json"
    if timed.is_file():
        t = json.loads(timed.read_text())
        print(
            f"whole run: {t['wall_s']} s wall, {t['cpu_s']} s CPU, exit {t['exit_code']}; load average "
            f"{t['load_before'][0]} before, {t['load_after'][0]} after, on {t['cpus']} CPUs"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", type=Path, default=None, help="print a run folder's per-study costs and stop")
    ap.add_argument("--time-run", type=Path, default=None, help="run --config into this folder, timed, then --table")
    ap.add_argument("--config", type=Path, default=Path("configs/default.yaml"), help="the config --time-run runs")
    ap.add_argument("--only", nargs="+", default=None, help="--time-run: only these studies (as mathcircuits run)")
    ap.add_argument("--quick", action="store_true", help="tiny random Llama, few pairs (a smoke check)")
    ap.add_argument("--model", default=None, help="model source (default: embedded; tiny-llama with --quick)")
    ap.add_argument("--pairs", type=int, default=None, help="pairs for the fast paths (default 64; 16 with --quick)")
    ap.add_argument("--plain-pairs", type=int, default=None, help="pairs for the plain paths (default 16; 8 quick)")
    ap.add_argument("--ops", nargs="+", default=["add", "mul"])
    ap.add_argument("--ablations", nargs="+", default=["position_mean", "mean"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--skip-forms",
        nargs="*",
        default=["time_span", "accumulation"],
        help="template forms left out (default: the word templates, as configs/default.yaml does)",
    )
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gen-items", type=int, default=None, help="AddSub prompts for generation (default 32; 8 quick)")
    ap.add_argument(
        "--gen-shots", type=int, default=None, help="few-shot exemplars in the prompts (default 2; 0 quick)"
    )
    ap.add_argument("--gen-max-new", type=int, default=None, help="generation budget (default 96; 16 quick)")
    ap.add_argument("--generation-only", action="store_true", help="run only the generation row")
    args = ap.parse_args()
    if args.time_run is not None:
        time_run(args.time_run, args.config, args.only)
        print_table(args.time_run)
        return
    if args.table is not None:
        print_table(args.table)
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model_name = args.model or ("tiny-llama" if args.quick else "embedded")
    n_fast = args.pairs or (16 if args.quick else 64)
    n_plain = min(args.plain_pairs or (8 if args.quick else 16), n_fast)

    rows: list[tuple[str, int, float, int, float, float]] = []

    def add(stage: str, fast_items: int, fast_s: float, plain_items: int, plain_s: float, diff: float) -> None:
        rows.append((stage, fast_items, fast_s / fast_items, plain_items, plain_s / plain_items, diff))
        r = rows[-1]
        print(f"  {stage:<22} fast {r[2] * 1e3:9.1f} ms/item   plain {r[4] * 1e3:9.1f} ms/item   diff {diff:.2e}")

    if not args.generation_only:
        _pair_stages(args, model_name, n_fast, n_plain, add)
    _generation_row(args, model_name, add)

    print(f"\n{'stage':<22} {'fast items':>10} {'fast ms/item':>13} {'plain items':>11} {'plain ms/item':>14} "
          f"{'plain/fast':>10} {'max |diff|':>11}")  # fmt: skip
    for stage, nf, sf, np_, sp, d in rows:
        print(f"{stage:<22} {nf:>10} {sf * 1e3:>13.1f} {np_:>11} {sp * 1e3:>14.1f} {sp / sf:>9.2f}x {d:>11.2e}")
    if not args.generation_only:
        print(f"(pair stages: plain paths ran on {n_plain} of the {n_fast} pairs; compare per item)")


def _generation_row(args: argparse.Namespace, model_name: str, add: Callable[..., None]) -> None:
    """Greedy generation on AddSub prompts, with and without the prefix KV cache, on the same prompts."""
    from mathcircuits.evaluation import load_benchmark
    from mathcircuits.evaluation.generation import first_step_logits, generate_greedy
    from mathcircuits.evaluation.prompts import math_prompt, select_exemplars
    from mathcircuits.models import load_hf_model

    n_items = args.gen_items or (8 if args.quick else 32)
    max_new = args.gen_max_new or (16 if args.quick else 96)
    n_shot = args.gen_shots if args.gen_shots is not None else (0 if args.quick else 2)  # tiny: 1 char = 1 token
    model, tok = load_hf_model(model_name)
    items = load_benchmark("AddSub", limit=n_items, seed=args.seed)
    shots = select_exemplars(load_benchmark("AddSub", split="train"), n_shot, args.seed)
    prompts = [math_prompt(it.question, shots) for it in items]
    kw = dict(max_new_tokens=max_new, batch_size=8, stop_at_answer=True)
    fast, t_fast = _timed(lambda: generate_greedy(model, tok, prompts, **kw))
    plain, t_plain = _timed(lambda: generate_greedy(model, tok, prompts, prefix_cache=False, **kw))
    # the first step alone (max_new_tokens=1): the prompt prefill, the part the prefix cache shortens
    first_fast, t_first_fast = _timed(lambda: first_step_logits(model, tok, prompts))
    first_plain, t_first_plain = _timed(lambda: first_step_logits(model, tok, prompts, prefix_cache=False))
    diff = _maxdiff(first_fast, first_plain)
    n_tok = [len(tok(p)["input_ids"]) for p in prompts]
    print(f"generation: {len(prompts)} AddSub prompts, {n_shot}-shot, mean {sum(n_tok) / len(n_tok):.0f} "
          f"tokens, max_new_tokens {max_new}, batch 8")  # fmt: skip
    add("generation", len(prompts), t_fast, len(prompts), t_plain, diff)
    add("generation 1st step", len(prompts), t_first_fast, len(prompts), t_first_plain, diff)
    print(f"  generation: texts differ: {sum(a != b for a, b in zip(fast, plain))} of {len(prompts)}")


def _pair_stages(
    args: argparse.Namespace, model_name: str, n_fast: int, n_plain: int, add: Callable[..., None]
) -> None:
    """The pair stages: scoring, patching forwards, head means, knockout, the analyses."""
    from mathcircuits.ablation import KnockoutScorer, head_means
    from mathcircuits.analysis import attention_by_role, mlp_probes
    from mathcircuits.data import GenerationConfig, generate_pairs, load_templates, score_pairs
    from mathcircuits.data.pairset import pair_batches
    from mathcircuits.models import fast_paths, load_model
    from mathcircuits.patching.cache import last_position_caches

    model = load_model(model_name)
    spec = model.spec
    per_template = max(2, n_fast // 8)
    config = GenerationConfig(operations=tuple(args.ops), n_per_template=per_template, seed=args.seed)
    pool = generate_pairs(model.tokenizer, load_templates(), config)
    if args.skip_forms:
        pool = pool.where([f not in args.skip_forms for f in pool.forms])
    pool = pool.shuffle(seed=args.seed)
    ds = pool.select(range(min(n_fast, len(pool))))
    sub = ds.select(range(n_plain))  # the plain paths' subsample: the first pairs of the same set
    tokens = [len(t) for t in ds.tokens]
    print(
        f"model {spec.describe()}; {len(ds)} pairs ({', '.join(args.ops)}; mean {sum(tokens) / len(tokens):.1f} "
        f"tokens), plain paths on the first {len(sub)}; {args.threads} thread(s); batch {args.batch_size}"
    )
    # scoring
    fast, t_fast = _timed(lambda: score_pairs(model, ds, batch_size=args.batch_size))
    with fast_paths(False):
        plain, t_plain = _timed(lambda: score_pairs(model, sub, batch_size=args.batch_size))
    diff = max(abs(a - b) for a, b in zip(fast.p_answer[:n_plain], plain.p_answer))
    assert fast.correct[:n_plain] == plain.correct, "scoring: fast and plain disagree on correctness"
    add("scoring", len(ds), t_fast, len(sub), t_plain, diff)

    # the two forwards of path patching
    def forwards(dataset: Any, share: bool) -> list[Any]:
        return [
            last_position_caches(model, b.tokens, b.cf_tokens, share_prefix=share)
            for b in pair_batches(dataset, args.batch_size, model.device)
        ]

    fast_c, t_fast = _timed(lambda: forwards(ds, True))
    plain_c, t_plain = _timed(lambda: forwards(sub, False))
    same = forwards(sub, True)  # untimed: the fast path on the subsample, for the difference
    diff = max(_maxdiff([c.logits, c.ref, c.cf], [p.logits, p.ref, p.cf]) for c, p in zip(same, plain_c))
    add("patching forwards", len(ds), t_fast, len(sub), t_plain, diff)

    # head means
    fast_m, t_fast = _timed(lambda: head_means(model, ds, batch_size=args.batch_size))
    with fast_paths(False):
        plain_m, t_plain = _timed(lambda: head_means(model, sub, batch_size=args.batch_size))
    diff = _maxdiff(head_means(model, sub, batch_size=args.batch_size).means, plain_m.means)
    add("head means", len(ds), t_fast, len(sub), t_plain, diff)

    # knockout: a fixed list of head sets, like one ranked order and random orders of a curve
    rng = random.Random(args.seed)
    all_heads = [(l, h) for l in range(spec.n_layers) for h in range(spec.n_heads)]
    upper = [(l, h) for l, h in all_heads if l >= spec.n_layers // 2]
    k_max = min(10, len(upper))
    sets = [upper[:k] for k in (1, k_max // 2, k_max)] + [rng.sample(all_heads, k) for k in (1, k_max // 2, k_max)]
    for ablation in args.ablations:
        means = fast_m if ablation == "mean" else None
        scorer = KnockoutScorer(model, ds, ablation, means=means, seed=args.seed, batch_size=args.batch_size)
        small = KnockoutScorer(model, sub, ablation, means=means, seed=args.seed, batch_size=args.batch_size)
        _, t_fast = _timed(lambda sc=scorer: [sc.score(s) for s in [[], *sets]])
        plain_l, t_plain = _timed(lambda sc=small: [sc.logits(s, fast=False) for s in [[], *sets]])
        fast_l = [small.logits(s) for s in [[], *sets]]
        points = 1 + len(sets)
        add(f"knockout {ablation}", len(ds) * points, t_fast, len(sub) * points, t_plain, _maxdiff(fast_l, plain_l))

    # analyses
    heads = sets[2]
    fast_a, t_fast = _timed(lambda: attention_by_role(model, ds, heads, batch_size=args.batch_size))
    with fast_paths(False):
        plain_a, t_plain = _timed(lambda: attention_by_role(model, sub, heads, batch_size=args.batch_size))
    add("attention", len(ds), t_fast, len(sub), t_plain, _maxdiff(fast_a.shares[:n_plain], plain_a.shares))
    fast_p, t_fast = _timed(lambda: mlp_probes(model, ds, batch_size=args.batch_size))
    with fast_paths(False):
        plain_p, t_plain = _timed(lambda: mlp_probes(model, sub, batch_size=args.batch_size))
    same_p = mlp_probes(model, sub, batch_size=args.batch_size)
    fields = ["input_sim_a", "input_sim_answer", "update_sim_answer", "update_direct_answer", "lens_prob"]
    diff = _maxdiff([getattr(same_p, f) for f in fields], [getattr(plain_p, f) for f in fields])
    add("mlp probes", len(ds), t_fast, len(sub), t_plain, diff)


if __name__ == "__main__":
    main()
