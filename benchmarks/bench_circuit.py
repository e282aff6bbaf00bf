"""Sender → receiver path patching: fast exact method vs the reference, and the cost that cannot be avoided.

For one receiver (the q, k or v input of the model's strongest head to the logits, or its KV group)
and every upstream head and MLP, patched at one token role's position, this times:

* the fast method (:func:`mathcircuits.circuit.exact_edges`): step 1 from the cached runs, step 2 as
  suffix-only forwards from the patched position with a KV cache of the prefix;
* the reference (:func:`mathcircuits.circuit.reference_edges`): two full hooked forwards per sender, on
  ``--ref-senders`` of the senders (its cost is linear in the senders, so the ratio is per sender);
* the floor: step 2 alone, i.e. one suffix forward per (sender, pair) row, which any exact method
  must run because the receiver's new input changes everything after it.

* the attribution screen (:func:`mathcircuits.circuit.attribute_edges`): step 1 exact, step 2 linearised
  (one forward and one backward for all senders).

It prints the ratios, the agreement on the shared senders (goal ≤ 1e-4), and the screen's Spearman
correlation and top-k overlap with the exact edges (bootstrap intervals over pairs).

    python benchmarks/bench_circuit.py --model embedded --pairs 6 --ref-senders 6 --receiver k --position B
"""

from __future__ import annotations

import argparse
import time

import torch

from mathcircuits.circuit import (
    Receiver,
    attribute_edges,
    exact_edges,
    pair_cache,
    reference_edges,
    screen_agreement,
    upstream_senders,
)
from mathcircuits.circuit.batches import ROLES
from mathcircuits.circuit.edges import receiver_effects
from mathcircuits.data import correct_pairs
from mathcircuits.models import load_model
from mathcircuits.models.families import block_structure
from mathcircuits.patching import get_metric, path_patch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--ref-senders", type=int, default=12)
    ap.add_argument("--receiver", choices=["q", "k", "v"], default="k")
    ap.add_argument("--position", choices=list(ROLES), default="B", help="A precedes the operator: no effect")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="where the model runs: cpu, cuda, cuda:1, ...")
    ap.add_argument("--top-k", type=int, default=10, help="top-k size of the screen's overlap with the exact edges")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = load_model(args.model, device=args.device)
    ds = correct_pairs(model, "add", n=args.pairs, template_ids=["add_eq_1"])
    metric = get_metric("relative_logit")
    top = path_patch(model, ds, senders=("heads",)).top_heads(1)[0]
    layer, head = top[0], top[1]
    receiver = Receiver(args.receiver, layer, head=head, by_group=args.receiver != "q").check(model.spec)
    senders = upstream_senders(model.spec, receiver, block_structure(model).parallel)
    tokens = torch.tensor(ds.tokens, device=model.device)
    cache = pair_cache(model, tokens, torch.tensor(ds.cf_tokens, device=model.device), torch.tensor(ds.answer_token))
    at = {"A": ds.pos_a, "B": ds.pos_b, "op": ds.pos_op, "last": [(p,) for p in ds.pos_last]}
    pos = at[args.position if args.receiver != "q" else "last"][0][-1]
    pos = pos % tokens.shape[1]
    n, S = len(ds), tokens.shape[1]
    print(f"{model.spec.describe()}: receiver {receiver.name} (shared by heads {receiver.shared_by(model.spec)}), ")
    where = args.position if args.receiver != "q" else "last"
    print(f"{len(senders)} senders at position {pos} ({where}), {n} pairs of {S} tokens")

    t0 = time.perf_counter()
    fast = exact_edges(model, cache, receiver, senders, [pos], metric)
    t_fast = time.perf_counter() - t0
    start = pos if args.receiver != "q" else S - 1
    values = torch.zeros(len(senders), n, S - start, *cache.ref[receiver.hook()].shape[3:], device=model.device)
    values += cache.ref[receiver.hook()][:, start:, receiver.index][None] if receiver.kind != "mlp" else 0
    t0 = time.perf_counter()
    receiver_effects(model, cache, receiver, values, start, metric, 256)
    t_floor = time.perf_counter() - t0
    sub = senders[:: max(1, len(senders) // args.ref_senders)][: args.ref_senders]
    t0 = time.perf_counter()
    ref = reference_edges(model, cache, receiver, sub, [pos], metric)
    t_ref = time.perf_counter() - t0
    idx = [senders.index(s) for s in sub]
    diff = float((fast.effects[:, idx] - ref.effects).abs().max())
    per_fast, per_ref = t_fast / len(senders), t_ref / len(sub)
    print(f"floor (step 2 alone): {t_floor:8.2f} s  = {1e3 * t_floor / len(senders):.1f} ms per sender")
    print(
        f"fast exact          : {t_fast:8.2f} s  = {1e3 * per_fast:.1f} ms per sender   ratio to floor "
        f"{t_fast / t_floor:.2f}x"
    )
    print(f"reference ({len(sub)} senders): {t_ref:8.2f} s  = {1e3 * per_ref:.1f} ms per sender")
    print(f"speed-up fast vs reference per sender: {per_ref / per_fast:.1f}x")
    print(f"agreement on the shared senders: max |fast - reference| = {diff:.2e}  (goal <= 1e-4)")
    t0 = time.perf_counter()
    screen = attribute_edges(model, cache, receiver, senders, [pos], metric)
    t_screen = time.perf_counter() - t0
    print(f"attribution screen  : {t_screen:8.2f} s  = {t_fast / t_screen:.1f}x faster than fast exact")
    agree = screen_agreement(screen.effects, fast.effects, k=min(args.top_k, len(senders)))
    print(f"screen vs exact ({n} pairs, 95% bootstrap intervals): {agree.format()}")


if __name__ == "__main__":
    main()
