"""Benchmark: exact path patching vs the reference method, and vs the cost floor, in one run.

    .venv/bin/python benchmarks/bench_patching.py --pairs 64            # the issue's setting (reference: long)
    .venv/bin/python benchmarks/bench_patching.py --pairs 64 --ref-pairs 8

Scans every head and MLP of the embedded model over few-shot addition pairs the
model answers correctly (all nine basic addition templates). Prints:
* the time of the exact method and of the reference method (one hooked forward
  per sender) on the same pairs, their agreement and the speed ratio;
* the cost floor: the two cached forward passes plus the last-position MLP work
  (the same number of rows per layer pushed through ln2 + MLP), and the exact
  method's ratio to it;
* the time per (sender, pair).
With --ref-pairs N < --pairs the reference runs on the first N pairs only and
its time per (sender, pair) is compared; the printout says so.
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--pairs", type=int, default=64)
    ap.add_argument("--ref-pairs", type=int, default=0, help="pairs for the reference method (0: the same pairs)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="where the model runs: cpu, cuda, cuda:1, ...")
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from mathcircuits.data import GenerationConfig, filter_correct, generate_pairs, load_templates, score_pairs
    from mathcircuits.data.pairset import pair_batches
    from mathcircuits.models import load_model
    from mathcircuits.patching import path_patch
    from mathcircuits.patching.cache import last_position_caches

    model = load_model(args.model, device=args.device)
    spec = model.spec
    ids = tuple(f"add_{f}_{i}" for f in ("eq", "st", "qa") for i in (1, 2, 3))
    pairs = generate_pairs(
        model.tokenizer,
        load_templates(),
        GenerationConfig(operations=("add",), template_ids=ids, n_per_template=max(12, args.pairs // 4)),
    )
    pairs = filter_correct(score_pairs(model, pairs, device=model.device)).shuffle(seed=0)
    pairs = pairs.select(range(min(args.pairs, len(pairs))))
    n = len(pairs)
    senders = spec.n_layers * spec.n_heads + spec.n_layers
    print(
        f"model {spec.name}: {spec.n_layers} layers x {spec.n_heads} heads + {spec.n_layers} MLPs = {senders} senders; "
        f"{n} pairs; mean length {sum(pairs['n_tokens']) / n:.1f} tokens; {args.threads} thread(s)"
    )

    # floor: the two forward passes + last-position MLP work, measured directly
    with torch.no_grad():
        t0 = time.perf_counter()
        for b in pair_batches(pairs, args.batch_size, model.device):
            last_position_caches(model, b.tokens, b.cf_tokens)
        t_fwd = time.perf_counter() - t0
        t0 = time.perf_counter()
        for b in pair_batches(pairs, args.batch_size, model.device):
            B = b.tokens.shape[0]
            for layer in range(spec.n_layers):
                rows = B * (spec.n_heads * (layer + 1) + layer)
                x = torch.randn(rows, spec.d_model, device=model.device, dtype=next(model.hf_model.parameters()).dtype)
                model.bridge.blocks[layer].mlp(model.bridge.blocks[layer].ln2(x))
        t_mlp = time.perf_counter() - t0
    floor = t_fwd + t_mlp

    t0 = time.perf_counter()
    exact = path_patch(model, pairs, keep_per_pair=True, batch_size=args.batch_size)
    t_exact = time.perf_counter() - t0

    ref_pairs = pairs if not args.ref_pairs or args.ref_pairs >= n else pairs.select(range(args.ref_pairs))
    n_ref = len(ref_pairs)
    t0 = time.perf_counter()
    ref = path_patch(
        model, ref_pairs, method="reference", keep_per_pair=True, batch_size=args.batch_size, progress=True
    )
    t_ref = time.perf_counter() - t0

    diff_h = float((exact.per_pair_heads[:n_ref] - ref.per_pair_heads).abs().max())
    diff_m = float((exact.per_pair_mlps[:n_ref] - ref.per_pair_mlps).abs().max())
    per_exact = t_exact / (senders * n)
    per_ref = t_ref / (senders * n_ref)
    print(f"floor  : {floor:8.2f} s  (two cached forwards {t_fwd:.2f} s + last-position MLP work {t_mlp:.2f} s)")
    print(
        f"exact  : {t_exact:8.2f} s  = {1e3 * per_exact:.3f} ms per (sender, pair)   "
        f"ratio to floor {t_exact / floor:.2f}x  (goal <= 1.5x)"
    )
    print(
        f"reference ({n_ref} pairs{'' if n_ref == n else ', a subset of the same pairs'}): {t_ref:8.2f} s  "
        f"= {1e3 * per_ref:.3f} ms per (sender, pair)"
    )
    print(f"speed-up exact vs reference per (sender, pair): {per_ref / per_exact:.1f}x  (goal >= 100x)")
    print(
        f"agreement on the shared pairs: max |exact - reference| heads {diff_h:.2e}, MLPs {diff_m:.2e}  (goal <= 1e-4)"
    )
    print("top heads:", ", ".join(f"L{l}.H{h} {e:+.4f}" for l, h, e in exact.top_heads(5)))


if __name__ == "__main__":
    main()
