"""Benchmark: the three knockout ablations side by side on the same pairs, heads and seeds.

    .venv/bin/python benchmarks/bench_ablations.py --run runs/default --ops add mul --k 10 --seeds 5

Reads a finished run folder (its correct pairs and the identify stage's patching
results), and for each operation knocks out the top-k heads by path-patching
effect and k random heads (``--seeds`` random sets, the same sets for every
ablation) with each ablation: the position-free mean, the per-position mean and
resampling from a counterfactual donor. Prints first-token and full-answer
accuracy with Wilson 95% intervals (over the pairs) for the clean model and the
top-k knockout, the random sets' mean, standard deviation and range, and the
seconds each ablation took (fast path, clean parts included).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", default="runs/default", help="a run folder with data/ and identify/ finished")
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--ops", nargs="+", default=["add", "mul"])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=128, help="at most this many correct pairs per operation")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--skip-forms",
        nargs="*",
        default=["time_span", "accumulation"],
        help="template forms left out (default: the word templates, ~90-token queries with no shared prefix)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from mathcircuits.ablation import KnockoutScorer, head_means
    from mathcircuits.ablation.hooks import ABLATIONS
    from mathcircuits.data import PairSet
    from mathcircuits.models import load_model
    from mathcircuits.patching import PatchingResult
    from mathcircuits.pipeline.context import select_pairs
    from mathcircuits.pipeline.paths import RunPaths
    from mathcircuits.stats.interval import wilson_interval

    paths = RunPaths(Path(args.run))
    model = load_model(args.model)
    correct = PairSet.load(paths.pairs_correct)
    if args.skip_forms and correct.has("form"):
        correct = correct.where([f not in args.skip_forms for f in correct.forms])
    spec = model.spec
    all_heads = [(l, h) for l in range(spec.n_layers) for h in range(spec.n_heads)]

    def fmt(hits: list[bool]) -> str:
        w = wilson_interval(sum(hits), len(hits))
        return f"{sum(hits) / len(hits):.3f} [{w.low:.3f}, {w.high:.3f}]"

    print(f"model {spec.describe()}; k={args.k}; {args.seeds} random head sets; threads {args.threads}")
    print(f"template forms left out: {args.skip_forms or 'none'}")
    for op in args.ops:
        ds = select_pairs(correct, op, args.pairs)
        top = [(l, h) for l, h, _ in PatchingResult.load(paths.patching(op)).top_heads(args.k)]
        rng = random.Random(0)
        randoms = [rng.sample(all_heads, args.k) for _ in range(args.seeds)]
        means = head_means(model, ds)
        print(f"\n{op}: {len(ds)} correct pairs; top-{args.k} heads {top}")
        head = f"{'ablation':<14} {'metric':<6} {'clean':>22} {'top-k':>22} {'random mean ± std':>18}"
        print(f"{head} {'range':>14} {'s':>6}")
        for ablation in ABLATIONS:
            t0 = time.perf_counter()
            scorer = KnockoutScorer(model, ds, ablation, means=means, seed=0)
            clean, key = scorer.score([]), scorer.score(top)
            rand = [scorer.score(r) for r in randoms]
            secs = time.perf_counter() - t0
            for m, name in ((1, "first"), (0, "full")):
                accs = [sum(r[m]) / len(r[m]) for r in rand]
                sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
                print(
                    f"{ablation:<14} {name:<6} {fmt(clean[m]):>22} {fmt(key[m]):>22} "
                    f"{statistics.mean(accs):>9.3f} ± {sd:.3f} {min(accs):>6.3f}-{max(accs):.3f} {secs:>6.1f}"
                )


if __name__ == "__main__":
    main()
