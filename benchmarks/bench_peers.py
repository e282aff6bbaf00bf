"""Our exact sender → receiver edges beside TransformerLens 4.3's direct path patching and attribution patching.

On the embedded model and one batch of correct pairs (one template, one answer length; the metric is the
whole answer's log-probability, teacher-forced, in both tools), in one run:

* **ours, exact** (:func:`mathcircuits.circuit.exact_edges`): for ``--receivers`` query receivers (the
  strongest heads writing the answer, at the last prompt position) and every head below them, patched at
  the last prompt position with its counterfactual value, other heads frozen. The change reaches the
  receiver **directly and through the MLPs in between** (path patching, Wang et al. 2023);
* **ours, reference** (:func:`mathcircuits.circuit.reference_edges`): the same edges by the definition
  (two full forwards per sender), on the ``--senders`` strongest senders: the agreement that matters;
* **ours, direct only**: the same receivers with the sender's write added to the receiver's input alone,
  not passed through the MLPs — the quantity TransformerLens computes, built here from our cached runs;
* **TransformerLens, direct path** (``transformer_lens.patching.get_act_patch_direct_path``, noising form:
  the clean run with the sender's counterfactual-minus-clean write, at the last prompt position only, added
  to each later head's own Q-input copy): one forward per later head, so it is run for ``--senders``
  senders only. It excludes the MLP route. Asked for K or V it refuses on this GQA model;
* **TransformerLens, attribution patching** (``tools.analysis.attribution_patching.attribution_patch``):
  node granularity (a first-order estimate of each head's *total* effect, denoising form; not an edge);
  edge granularity refuses GQA.

It prints time per edge (per scored quantity) for each, the agreement of each with our reference (largest
difference in nats; Spearman correlation where the quantities differ), what each refuses, and the
machine's load before and after.

    python benchmarks/bench_peers.py --model embedded --pairs 4 --receivers 3 --senders 2
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from scipy.stats import spearmanr

from mathcircuits.circuit import (
    Receiver,
    circuit_batches,
    exact_edges,
    pair_cache,
    reference_edges,
    upstream_senders,
)
from mathcircuits.circuit.chain import receiver_input
from mathcircuits.circuit.edges import receiver_effects
from mathcircuits.data import GenerationConfig, filter_correct, generate_pairs, load_templates, score_pairs
from mathcircuits.models import hooks, load_model
from mathcircuits.patching import get_metric


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--operation", default="add")
    ap.add_argument("--template", default="add_eq_1")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--receivers", type=int, default=3)
    ap.add_argument("--senders", type=int, default=2, help="senders run through the reference and TransformerLens")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="where the model runs: cpu, cuda, cuda:1, ...")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"before: {_load()}; torch threads {args.threads}")
    model = load_model(args.model, device=args.device)
    compare(model, args.operation, args.template, args.pairs, args.receivers, args.senders)
    print(f"\nafter: {_load()}")


def compare(model, operation: str, template: str, n_pairs: int, n_receivers: int, n_senders: int) -> dict:
    """Run every comparison on one model, print the table; return the times per edge and the agreements."""
    args = argparse.Namespace(operation=operation, template=template, pairs=n_pairs, receivers=n_receivers,
                              senders=n_senders)  # fmt: skip
    bridge, spec = model.bridge, model.spec
    gen = GenerationConfig(operations=(args.operation,), template_ids=(args.template,), n_per_template=40)
    ds = filter_correct(score_pairs(model, generate_pairs(model.tokenizer, load_templates(), gen), device=model.device))
    batch = max(circuit_batches(model, ds, "query", args.pairs), key=lambda b: len(b.idx))
    P, n_ans = batch.n_prompt, batch.answers.shape[1]
    cache = pair_cache(model, batch.tokens[:, :P], batch.cf_tokens[:, :P], batch.answers[:, 0], answers=batch.answers)
    metric = get_metric("answer_logprob")
    last = P - 1
    print(f"{len(batch.idx)} correct {args.operation} pairs of {args.template}, {P} prompt + {n_ans} answer tokens")

    # the receivers: the heads with the strongest direct effect on the answer (sender → logits, exact)
    heads = [s for s in upstream_senders(spec, Receiver("logits"), False, ("head",)) if s.layer >= 2]
    to_logits = exact_edges(model, cache, Receiver("logits"), heads, [last], metric).effects.mean(0)
    receivers = [heads[i] for i in to_logits.abs().argsort(descending=True)[: args.receivers].tolist()]
    low = min(r.layer for r in receivers)
    senders = [s for s in upstream_senders(spec, Receiver("q", low, 0), False, ("head",))]
    print(f"receivers (q at the last prompt position): {[r.name for r in receivers]}; {len(senders)} senders below")

    # ours, exact: every sender for every receiver
    ours, t_exact = {}, 0.0
    for r in receivers:
        res, dt = _timed(lambda r=r: exact_edges(model, cache, Receiver("q", r.layer, r.head, position=last), senders,
                                                   [last], metric))  # fmt: skip
        ours[r] = res.effects.mean(0)
        t_exact += dt
    n_exact = len(receivers) * len(senders)
    strongest = torch.stack([ours[r].abs() for r in receivers]).amax(0).argsort(descending=True)[: args.senders]
    chosen = [senders[i] for i in sorted(strongest.tolist())]
    print(f"senders compared: {[s.name for s in chosen]}")

    # ours, reference (the definition) on the chosen senders
    ref, t_ref = {}, 0.0
    for r in receivers:
        res, dt = _timed(lambda r=r: reference_edges(model, cache, Receiver("q", r.layer, r.head, position=last),
                                                       chosen, [last], metric))  # fmt: skip
        ref[r] = res.effects.mean(0)
        t_ref += dt
    exact_chosen = {r: ours[r][[senders.index(s) for s in chosen]] for r in receivers}
    gap_ref = max(float((exact_chosen[r] - ref[r]).abs().max()) for r in receivers)

    # ours, direct only: the sender's write added to the receiver's query input, not through the MLPs
    direct, t_direct = {}, 0.0
    W_O = bridge.W_O
    for r in receivers:
        rec = Receiver("q", r.layer, r.head, position=last)
        t = time.perf_counter()
        base = cache.ref[hooks.resid_pre(r.layer)][:, last]
        dz = [
            cache.cf[hooks.z(s.layer)][:, last, s.head] - cache.ref[hooks.z(s.layer)][:, last, s.head] for s in chosen
        ]
        writes = torch.stack([d @ W_O[s.layer, s.head] for d, s in zip(dz, chosen)])
        q_new = receiver_input(model, cache.structure, rec, base[None] + writes)[..., r.head, :]  # [s, B, d_head]
        vals = cache.ref[rec.hook()][:, last:, r.head][None].repeat(len(chosen), 1, 1, 1).clone()
        vals[:, :, 0] = q_new
        direct[r] = receiver_effects(model, cache, rec, vals, last, metric, 256).mean(1)
        t_direct += time.perf_counter() - t

    # TransformerLens: direct path patching (noising form, the last prompt position only)
    from transformer_lens.patching import get_act_patch_direct_path

    clean_run, cf_run = {}, {}
    _, c_cache = bridge.run_with_cache(cache.tokens)
    _, f_cache = bridge.run_with_cache(cache.cf_tokens)

    def tl_metric(logits: torch.Tensor) -> torch.Tensor:
        lp = torch.log_softmax(logits[:, -n_ans:].float(), -1).gather(-1, batch.answers[..., None])[..., 0]
        return lp.sum(-1).mean()

    clean_value = float(tl_metric(bridge(cache.tokens)))
    tl, t_tl, tl_edges = {}, 0.0, 0
    for s in chosen:
        name = hooks.z(s.layer)
        patched_z = c_cache[name].clone()
        patched_z[:, last] = f_cache[name][:, last]  # "clean" = the counterfactual write at the last position only
        clean_run[name], cf_run[name] = patched_z, c_cache[name]
        res, dt = _timed(lambda s=s, name=name: get_act_patch_direct_path(
            bridge, cache.tokens, {name: clean_run[name]}, {name: cf_run[name]}, tl_metric, s.layer, s.head,
            component="q", verbose=False))  # fmt: skip
        t_tl += dt
        tl_edges += (spec.n_layers - s.layer - 1) * spec.n_heads
        for r in receivers:
            tl[(s, r)] = float(res[r.layer, r.head]) - clean_value
    refusals = {}
    for comp in ("k", "v"):
        try:
            get_act_patch_direct_path(bridge, cache.tokens, c_cache, f_cache, tl_metric, chosen[0].layer,
                                      chosen[0].head, component=comp, verbose=False)  # fmt: skip
            refusals[comp] = "ran"
        except ValueError as err:
            refusals[comp] = " ".join(str(err).split())[:160]
    tl_vs_direct = max(abs(tl[(s, r)] - float(direct[r][j])) for j, s in enumerate(chosen) for r in receivers)
    tl_vs_exact = max(abs(tl[(s, r)] - float(ref[r][j])) for j, s in enumerate(chosen) for r in receivers)
    pairs_tl = [(tl[(s, r)], float(ref[r][j])) for j, s in enumerate(chosen) for r in receivers]
    rho = spearmanr([a for a, _ in pairs_tl], [b for _, b in pairs_tl]).statistic

    # TransformerLens: attribution patching (node granularity; edge granularity on GQA)
    from transformer_lens.tools.analysis.attribution_patching import EdgeAttributionConfig, attribution_patch

    def one_metric(logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits[0, -n_ans:].float(), -1).gather(-1, batch.answers[:1, :, None][0])[..., 0].sum()

    node_res, t_attr = None, 0.0
    try:
        node_res, t_attr = _timed(lambda: attribution_patch(bridge, cache.tokens[:1], cache.cf_tokens[:1], one_metric))
        node_note = f"{len(node_res.node_scores)} nodes"
    except (ValueError, NotImplementedError) as err:
        node_note = "refused: " + " ".join(str(err).split())[:160]
    try:
        attribution_patch(bridge, cache.tokens[:1], cache.cf_tokens[:1], one_metric, EdgeAttributionConfig("edge"))
        edge_note = "ran"
    except (ValueError, NotImplementedError) as err:
        edge_note = "refused: " + " ".join(str(err).split())[:160]

    print("\n| method | measures | time per edge | agreement with our reference | refuses |")
    print("|---|---|---|---|---|")
    print(
        f"| ours, exact (`exact_edges`) | sender → q, direct + through MLPs, heads frozen | "
        f"{1e3 * t_exact / n_exact:.1f} ms ({n_exact} edges) | max diff {gap_ref:.1e} nats | "
        "nothing (k/v as KV groups) |"
    )
    print(
        f"| ours, reference (`reference_edges`) | the same, by definition (2 forwards per sender) | "
        f"{1e3 * t_ref / (len(receivers) * len(chosen)):.1f} ms ({len(receivers) * len(chosen)} edges) | — | nothing |"
    )
    print(
        f"| ours, direct only | sender write added to q input alone (no MLP route) | "
        f"{1e3 * t_direct / (len(receivers) * len(chosen)):.1f} ms | (a different quantity) | — |"
    )
    print(
        f"| TL 4.3 `get_act_patch_direct_path` | direct only, one forward per later head | "
        f"{1e3 * t_tl / tl_edges:.1f} ms ({tl_edges} edges for {len(chosen)} senders) | vs ours direct-only max "
        f"diff {tl_vs_direct:.1e}; vs our reference max diff {tl_vs_exact:.2e}, Spearman {rho:.2f} | "
        f"k: {refusals['k']}; v: {refusals['v']} |"
    )
    if node_res is not None:
        n = len(node_res.node_scores)
        print(
            f"| TL 4.3 `attribution_patch` (node) | first-order total effect per node (not an edge), 1 pair | "
            f"{1e3 * t_attr / n:.2f} ms per node | (a different quantity) | edge granularity: {edge_note} |"
        )
    else:
        print(f"| TL 4.3 `attribution_patch` | — | — | — | node: {node_note}; edge: {edge_note} |")
    print("\nper edge (nats): sender → receiver: reference, exact, ours direct-only, TL direct path")
    for j, s in enumerate(chosen):
        for r in receivers:
            print(
                f"  {s.name} → {r.name}.q: {float(ref[r][j]):+.4f}  {float(exact_chosen[r][j]):+.4f}  "
                f"{float(direct[r][j]):+.4f}  {tl[(s, r)]:+.4f}"
            )
    return {
        "exact_ms_per_edge": 1e3 * t_exact / n_exact,
        "exact_edges": n_exact,
        "reference_ms_per_edge": 1e3 * t_ref / (len(receivers) * len(chosen)),
        "tl_direct_path_ms_per_edge": 1e3 * t_tl / tl_edges,
        "tl_direct_path_edges": tl_edges,
        "tl_over_exact_per_edge": (t_tl / tl_edges) / (t_exact / n_exact),
        "exact_vs_reference_max_diff": gap_ref,
        "tl_vs_ours_direct_max_diff": tl_vs_direct,
        "tl_vs_reference_spearman": float(rho),
        "tl_refuses": refusals,
        "tl_attribution_edge": edge_note,
    }


if __name__ == "__main__":
    main()
