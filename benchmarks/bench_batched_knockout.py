"""Benchmark: one knockout set per forward against many sets per forward, side by side in one process.

    .venv/bin/python benchmarks/bench_batched_knockout.py --pairs 16 --draws 20 --batch-sets 16

The validate stage's C2 and C4 work on the embedded model: correct few-shot addition pairs
(template add_eq_1), ``position_mean`` over a pool of every generated pair, a fixed key set, then
``random_control`` (the key set and ``--draws`` depth-matched random sets) and ``mlp_margin`` (the
key set and the same draws), once with ``batch_sets=1`` (one forward per set, the reference) and once
with ``--batch-sets``, alternating ``--repeats`` times on the same pairs and draws. Prints wall and
CPU seconds of each path, their ratio, and whether the results agree (C2's correctness equal, C4's
margins within float tolerance).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--batch-sets", type=int, default=16)
    ap.add_argument("--key", default="10.1,12.3,14.5,17.2", help="key heads as layer.head, comma-separated")
    ap.add_argument("--margin-from", type=int, default=14, help="C4's first MLP layer")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from mathcircuits.ablation import KnockoutScorer, PositionPool, mlp_margin, random_control
    from mathcircuits.data import GenerationConfig, filter_correct, generate_pairs, load_templates, score_pairs
    from mathcircuits.models import compare, load_model, model_depth

    model = load_model(args.model)
    config = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=81)
    generated = generate_pairs(model.tokenizer, load_templates(), config)
    pairs = filter_correct(score_pairs(model, generated))
    pairs = pairs.select(range(min(args.pairs, len(pairs))))
    pool = PositionPool(model, generated)
    key = [tuple(int(x) for x in h.split(".")) for h in args.key.split(",")]
    layers = range(args.margin_from, model.spec.n_layers)

    def work(batch_sets: int, n_draws: int):
        scorer = KnockoutScorer(model, pairs, "position_mean", None, "all", 0, pool=pool)
        ctl = random_control(model, pairs, key, n_draws=n_draws, ablation="position_mean", scorer=scorer,
                             batch_sets=batch_sets)  # fmt: skip
        margin = mlp_margin(model, pairs, key, layers, "position_mean", scorer=scorer, random_sets=ctl.draws,
                            batch_sets=batch_sets)  # fmt: skip
        return ctl, margin

    work(1, 2), work(args.batch_sets, 2)  # the run-time checks and the pool's statistics, outside the timing
    times: dict[int, list[tuple[float, float]]] = {1: [], args.batch_sets: []}
    results = {}
    for _ in range(args.repeats):
        for b in times:
            t0, c0 = time.perf_counter(), time.process_time()
            results[b] = work(b, args.draws)
            times[b].append((time.perf_counter() - t0, time.process_time() - c0))
            print(f"batch_sets={b}: wall {times[b][-1][0]:.1f} s, cpu {times[b][-1][1]:.1f} s", flush=True)
    (ctl1, m1), (ctlb, mb) = results[1], results[args.batch_sets]
    same_c2 = torch.equal(ctl1.random_correct, ctlb.random_correct) and torch.equal(ctl1.key_correct, ctlb.key_correct)
    margins = [torch.cat([m.clean_margin[None], m.ablated_margin[None], m.random_ablated]) for m in (mb, m1)]
    diff, tol = compare(*margins, model.dtype, model_depth(model))

    print(f"model {model.spec.describe()}; {len(pairs)} pairs; key {key}; {len(ctl1.draws)} draws; "
          f"MLP layers {layers.start}-{layers.stop - 1}; threads {args.threads}; repeats {args.repeats}")  # fmt: skip
    for b, ts in times.items():
        wall, cpu = statistics.median(t for t, _ in ts), statistics.median(c for _, c in ts)
        print(f"batch_sets={b:<3} wall {wall:7.1f} s (runs {', '.join(f'{t:.1f}' for t, _ in ts)})  cpu {cpu:7.1f} s")
    w1, wb = (statistics.median(t for t, _ in times[b]) for b in times)
    c1, cb = (statistics.median(c for _, c in times[b]) for b in times)
    print(f"ratio one-set / batched: wall {w1 / wb:.2f}x, cpu {c1 / cb:.2f}x")
    print(f"C2 correctness equal: {same_c2}; C4 margins max diff {diff:.2e} (tolerance {tol:.2e})")
    print(f"key drop {ctlb.key_drop():+.3f}, p = {ctlb.p_value():.3f}; margin drop {mb.drop():+.3f}")


if __name__ == "__main__":
    main()
