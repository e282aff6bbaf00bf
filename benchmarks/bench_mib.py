"""MIB's circuit metrics (CPR, CMD) of edge rankings on both embedded models, beside TransformerLens' EAP.

For each model (``embedded`` SmolLM2-135M, ``gemma3-270m``) and operation (add, sub), on correct few-shot pairs
with an operand counterfactual (``--templates`` per operation; the scoring pairs and the evaluation pairs are
disjoint halves), in one process:

* rankings of every edge of MIB's graph (:func:`mathcircuits.circuit.graph_edges`): **exact** discovery
  (:func:`~mathcircuits.circuit.discover_circuit` under a CPU-time budget, its edges as scores by
  :func:`~mathcircuits.circuit.eap_compare.discovery_scores`), **EAP** and **EAP-IG**
  (:func:`~mathcircuits.circuit.eap_scores`), each also ranked by every scoring pair's ``|effect|``
  (``aggregate="magnitude"``), **edge masks** learned from one of the EAP-IG rankings (``--start``;
  :func:`~mathcircuits.circuit.learn_edge_masks`, ``--mask-steps``, ``--mask-pairs``), the **search** on whole
  circuits from it (:func:`~mathcircuits.circuit.search_circuits`, ``--objective``, ``--min-wins``, ``--no-search``
  to skip), and **random** scores;
* each ranking's CPR and CMD (:func:`~mathcircuits.circuit.mib_scores`, MIB-style logit difference, bootstrap
  intervals), the scorer's time per edge and wall time, and the evaluation's time;
* on the first model and operation only, on a few pairs: EAP-IG's convergence (steps 1, 2, 5, 10, 20:
  Spearman/Kendall with the most steps) and the agreement of EAP and EAP-IG with exact edges on the logits, a
  value group and an MLP in the top third (:func:`~mathcircuits.circuit.exact_agreement`);
* TransformerLens 4.3's edge attribution (``attribution_patch`` with ``EdgeAttributionConfig("edge")``): what it
  says on the model (it refuses grouped-KV models), and, on a planted tiny Llama without grouped KV heads, its
  time, its CPR/CMD and its rank agreement with our EAP on the same pairs and metric;
* on the first model, TransformerLens' ``get_act_patch_direct_path`` beside our exact edges
  (``bench_peers.compare``: time per edge and the ratio).

Results go to ``benchmarks/results/mib_<UTC date>.json`` (the load average before and after with them) and a
markdown table to stdout.

    nice -n 15 .venv/bin/python benchmarks/bench_mib.py                      # the defaults: ~20 min when quiet
    nice -n 15 .venv/bin/python benchmarks/bench_mib.py --models embedded --operations add --pairs 8
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from scipy.stats import spearmanr

from mathcircuits.circuit import (
    EdgeScores,
    Receiver,
    copy_pairs,
    discover_circuit,
    eap_scores,
    exact_agreement,
    graph_edges,
    ig_convergence,
    mib_node_scores,
    mib_scores,
    node_scores,
    write_graph,
)
from mathcircuits.circuit.eap_compare import discovery_scores
from mathcircuits.circuit.masks import learn_edge_masks
from mathcircuits.circuit.mib import paired_difference
from mathcircuits.circuit.mib_result import MIB_PERCENTAGES
from mathcircuits.circuit.planted import plant_copy
from mathcircuits.circuit.search import search_circuits
from mathcircuits.data import GenerationConfig, filter_correct, generate_pairs, load_templates, score_pairs
from mathcircuits.models import UnsupportedFamilyError, from_hf, load_model
from mathcircuits.models.families import block_structure
from mathcircuits.models.tiny import tiny_model

sys.path.insert(0, str(Path(__file__).parent))
from bench_peers import compare as direct_path_compare  # noqa: E402
from mib_peers import answers_of, tl_edge_scores, tl_node_scores, tl_on_model  # noqa: E402

from mathcircuits.stats import Uncertainty

RESULTS = Path(__file__).parent / "results"


def _load() -> dict:
    one, five, fifteen = os.getloadavg()
    return {"load_1min": one, "load_5min": five, "load_15min": fifteen, "cpus": os.cpu_count()}


def _iv(iv) -> dict:
    return {"value": iv.value, "low": iv.low, "high": iv.high}


def _pairs(model, operation: str, templates: list[str], n: int, seed: int):
    gen = GenerationConfig(operations=(operation,), template_ids=tuple(templates), n_per_template=n,
                           counterfactual="operands", seed=seed)  # fmt: skip
    ds = filter_correct(score_pairs(model, generate_pairs(model.tokenizer, load_templates(), gen), device=model.device))
    return ds


def _split(ds, n_score: int, n_eval: int):
    """Disjoint scoring and evaluation pairs, alternating within each template so both halves have every template."""
    by_t: dict[str, list[int]] = {}
    for i, t in enumerate(ds.template_ids):
        by_t.setdefault(t, []).append(i)
    score, evaluate = [], []
    for rows in by_t.values():
        score += rows[0::2]
        evaluate += rows[1::2]
    return ds.select(sorted(score)[:n_score]), ds.select(sorted(evaluate)[:n_eval])


def random_scores(model, seed: int) -> EdgeScores:
    parallel = block_structure(model).parallel
    edges = graph_edges(model.spec, parallel)
    values = torch.randn(len(edges), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return EdgeScores(model.spec, parallel, edges, tuple(values.tolist()), "random", 0.0)


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _cpu_timed(fn):
    """The result, wall seconds and this process's CPU seconds (user + system, every thread)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def _row(method: str, scores, wall: float, mib, cpu: float | None = None) -> dict:
    return {
        "method": method,
        "level": mib.level,
        "cpr": _iv(mib.cpr),
        "cmd": _iv(mib.cmd),
        "score_seconds": wall,
        "score_cpu_seconds": cpu,
        "ms_per_edge": 1e3 * wall / len(scores),
        "n_edges": len(scores),
        "eval_seconds": mib.seconds,
        "n_eval_pairs": mib.n_pairs,
        "interval_over": mib.interval_over,
        "denominator": _iv(mib.denominator),
        "f_absolute": [x.value for x in mib.faithfulness_absolute],
        "f_absolute_low": [x.low for x in mib.faithfulness_absolute],
        "f_absolute_high": [x.high for x in mib.faithfulness_absolute],
        "percentages": list(mib.percentages),
        "f_signed": [x.value for x in mib.faithfulness_signed],
    }


def tiny_comparison(args) -> dict:
    """Our EAP and TransformerLens' on a planted tiny Llama with n_kv = n_heads: time, CPR/CMD, rank agreement."""
    model = from_hf(*tiny_model("llama", n_kv_heads=4))
    plant_copy(model)
    pairs = copy_pairs(model.tokenizer, 2 * args.tiny_pairs, seed=1)
    score, evaluate = pairs.select(range(args.tiny_pairs)), pairs.select(range(args.tiny_pairs, 2 * args.tiny_pairs))
    ours, t_ours = _timed(lambda: eap_scores(model, score, "eap", metric="logit_diff"))
    ours_ig, t_ig = _timed(lambda: eap_scores(model, score, "eap-ig", args.steps, metric="logit_diff"))
    rows = answers_of(score, model)
    toks = torch.stack([r[0] for r in rows])
    cfs = torch.stack([r[1] for r in rows])
    first, good, bad = [r[2] for r in rows], [r[3] for r in rows], [r[4] for r in rows]
    theirs, t_tl = _timed(lambda: tl_edge_scores(model, toks, cfs, first, good, bad))
    out = {"model": "planted tiny Llama, 4 heads, 4 KV heads (no grouping)", "n_edges": len(ours), "rows": []}
    for name, sc, dt in (("ours EAP", ours, t_ours), ("ours EAP-IG", ours_ig, t_ig), ("TL 4.3 EAP", theirs, t_tl)):
        mib = mib_scores(model, evaluate, sc, metric="logit_diff", uncertainty=Uncertainty(n_boot=args.n_boot))
        out["rows"].append(_row(name, sc, dt, mib))
    out["spearman_tl_vs_ours_eap"] = float(spearmanr(theirs.scores, ours.scores).statistic)
    top = [{e for e, _ in sc.top(10, absolute=True)} for sc in (theirs, ours)]
    out["top10_overlap_tl_vs_ours_eap"] = len(top[0] & top[1]) / 10
    return out


def run_task(model, name: str, operation: str, args, extras: bool) -> dict:
    templates = [f"{operation}_eq_1", f"{operation}_eq_2"][: args.templates]
    ds, t_pairs = _timed(lambda: _pairs(model, operation, templates, args.generate, args.seed))
    score, evaluate = _split(ds, args.pairs, args.eval_pairs)
    print(f"[{name} {operation}] {len(ds)} correct pairs ({t_pairs:.0f} s): {len(score)} to score, "
          f"{len(evaluate)} to evaluate; {_load()}", flush=True)  # fmt: skip
    task: dict = {"model": name, "operation": operation, "templates": templates, "rows": []}
    if block_structure(model).attn_out_norm is not None:  # e.g. Gemma 3: MIB's curves are undefined at edge level
        try:  # the library's own refusal, in its words (the masked run refuses before any forward)
            mib_scores(model, evaluate.select([0]), random_scores(model, args.seed), uncertainty=Uncertainty(n_boot=10))
        except UnsupportedFamilyError as err:
            task["refused"] = str(err)
            print(f"  edges refused: {err}", flush=True)
            if args.level != "edge":
                node_rows(model, score, evaluate, args, task)  # MIB's level="node" is defined there
            return task
    if args.level == "node":
        node_rows(model, score, evaluate, args, task)
        return task
    boot = Uncertainty(n_boot=args.n_boot)
    curves = {}

    def evaluate_row(method: str, scores, wall: float, cpu: float, **extra) -> None:
        mib = mib_scores(model, evaluate, scores, metric="logit_diff", uncertainty=boot)
        curves[method] = mib
        task["rows"].append({**_row(method, scores, wall, mib, cpu), **extra})
        print(f"  {method} (edges): CPR {mib.cpr.format()} CMD {mib.cmd.format()}; scores {wall:.1f} s wall, "
              f"{cpu:.1f} s CPU; curves {mib.seconds:.1f} s", flush=True)  # fmt: skip

    ig, t_ig, c_ig = _cpu_timed(lambda: eap_scores(model, score, "eap-ig", args.steps, metric="logit_diff"))
    evaluate_row("eap-ig", ig, t_ig, c_ig)
    mag, t_mag, c_mag = _cpu_timed(
        lambda: eap_scores(model, score, "eap-ig", args.steps, metric="logit_diff", aggregate="magnitude")
    )
    evaluate_row("eap-ig magnitude", mag, t_mag, c_mag)
    # the search and the masks start from one of the two rankings; their time includes the start's
    start, t_st, c_st, from_ = (mag, t_mag, c_mag, "EAP-IG magnitude") if args.start == "magnitude" else (
        ig, t_ig, c_ig, "EAP-IG")  # fmt: skip
    for n_mask in args.mask_pairs if args.mask_steps else ():
        more = _split(ds, n_mask, args.eval_pairs)[0] if n_mask else score  # a superset; the same evaluation pairs
        learned, t_m, c_m = _cpu_timed(lambda m=more: learn_edge_masks(model, m, start=start, steps=args.mask_steps))
        evaluate_row(
            f"edge masks (from {from_}, {len(more)} pairs)", learned.scores, t_m + t_st, c_m + c_st,
            masks_cpu_seconds=c_m,
            mask_pairs=len(more), trained_sizes=list(learned.sizes), loss=list(learned.loss),
            scoring_cmd_start=learned.cmd_start, scoring_cmd_learned=learned.cmd_learned, kept=learned.kept,
        )  # fmt: skip
        _save_circuits(learned, learned.grid_sizes, f"masks{len(more)}", name, operation, args)
    if args.search:
        found, t_s, c_s = _cpu_timed(
            lambda: search_circuits(
                model, score, start=start, shrink=args.shrink, objective=args.objective, min_wins=args.min_wins
            )
        )
        evaluate_row(
            f"search (from {from_}, {args.objective}, wins {args.min_wins:g})", found.scores, t_s + t_st, c_s + c_st,
            search_cpu_seconds=c_s,
            circuits_run=found.evaluated, steps=list(zip(found.sizes, found.f_score, found.choice)),
        )  # fmt: skip
        _save_circuits(found, found.sizes, "search", name, operation, args)
    _paired(curves, "eap-ig", boot, task)
    _paired(curves, "eap-ig magnitude", boot, task)
    eap, t_eap, c_eap = _cpu_timed(lambda: eap_scores(model, score, "eap", metric="logit_diff"))
    evaluate_row("eap", eap, t_eap, c_eap)
    eap_mag, t_em, c_em = _cpu_timed(
        lambda: eap_scores(model, score, "eap", metric="logit_diff", aggregate="magnitude")
    )
    evaluate_row("eap magnitude", eap_mag, t_em, c_em)
    if args.discover_seconds:
        disc, t_d, c_d = _cpu_timed(lambda: discover_circuit(model, score, max_seconds=args.discover_seconds,
                                                              batch_size=8))  # fmt: skip
        ranked = discovery_scores(disc, model, ig)
        evaluate_row("exact discovery, then EAP-IG", ranked, t_d, c_d, parts=[list(p) for p in ranked.parts])
    rnd, t_r, c_r = _cpu_timed(lambda: random_scores(model, args.seed))
    evaluate_row("random", rnd, t_r, c_r)
    _paired(curves, "eap-ig", boot, task)
    if args.level == "both":
        node_rows(model, score, evaluate, args, task)
    if extras and args.convergence_pairs:
        conv = ig_convergence(model, score.select(range(min(args.convergence_pairs, len(score)))),
                              steps=tuple(args.convergence_steps),
                              uncertainty=Uncertainty(n_boot=args.n_boot_rank))  # fmt: skip
        task["convergence"] = conv.to_dataframe().to_dict("records")
        task["convergence_seconds"] = conv.seconds
        print(f"  {conv!r} ({conv.seconds:.0f} s)", flush=True)
    if extras and args.agree_receivers:
        sub = score.select(range(min(args.agree_pairs, len(score))))
        L = model.spec.n_layers  # the logits, and a value group and an MLP in the top third (no query: one pass)
        receivers = [Receiver("logits"), Receiver("v", L - 1 - L // 6, group=0), Receiver("mlp", L - 1 - L // 4)]
        agree = exact_agreement(model, sub, receivers[: 1 + args.agree_receivers], args.steps,
                                uncertainty=Uncertainty(n_boot=args.n_boot_rank, seed=args.seed))  # fmt: skip
        task["agreement"] = {
            "receivers": list(agree.receivers),
            "n_edges": agree.n_edges,
            "rows": agree.to_dataframe().to_dict("records"),
            "seconds": agree.seconds,
        }
        print(f"  vs exact on {agree.receivers}: EAP {agree.eap.format()}; EAP-IG {agree.eap_ig.format()}", flush=True)
    return task


def _paired(curves: dict, reference: str, boot, task: dict) -> None:
    """Each row's CMD and CPR minus the reference's, paired over the same evaluation pairs (rows not yet paired)."""
    for row in task["rows"]:
        if f"cmd_minus_{reference}" in row:
            continue
        if row["method"] in curves and row["method"] != reference and row.get("level") == curves[reference].level:
            cmd, cpr = paired_difference(curves[row["method"]], curves[reference], boot)
            row[f"cmd_minus_{reference}"], row[f"cpr_minus_{reference}"] = _iv(cmd), _iv(cpr)
            print(f"  {row['method']} − {reference} ({row['level']}s): CMD {cmd.format()}, CPR {cpr.format()}",
                  flush=True)  # fmt: skip


def _save_circuits(found, sizes, method: str, name: str, operation: str, args) -> None:
    """A method's circuit at each size of MIB's grid as a graph file, with its exact f on the scoring pairs
    (``found``: :class:`SearchedCircuits` or :class:`LearnedMasks`; ``sizes``: the sizes it measured f at)."""
    folder = RESULTS / f"circuits_{datetime.now(timezone.utc):%Y-%m-%d}{'_' + args.tag if args.tag else ''}"
    folder.mkdir(parents=True, exist_ok=True)
    n_edges = len(found.scores)
    for p in MIB_PERCENTAGES[:-1]:
        n = int(p * n_edges)
        if n in sizes:
            write_graph(found.scores, folder / f"{name}_{operation}_{method}_{100 * p:g}pct.json",
                        circuit=found.circuit(p), faithfulness=found.f_at(n))  # fmt: skip


def node_rows(model, score, evaluate, args, task: dict) -> None:
    """MIB's curves at node level (heads and MLPs; ``mib_node_scores``) for the four node rankings, exact and
    EAP-IG by each pair's |effect|, and TransformerLens 4.3's node attribution, on the same pairs and metric."""
    makers = {m: (lambda m=m: node_scores(model, score, m, steps=args.steps, seed=args.seed))
              for m in ("exact", "eap", "eap-ig", "random")}  # fmt: skip
    for m in ("exact", "eap-ig"):  # each pair's |effect| (eap_scores' aggregate="magnitude", at node level)
        makers[f"{m} magnitude"] = lambda m=m: node_scores(model, score, m, steps=args.steps, aggregate="magnitude")
    makers["TL 4.3 EAP"] = lambda: tl_node_scores(model, score)
    boot = Uncertainty(n_boot=args.n_boot)
    curves = _rank_rows(
        makers, lambda sc: mib_node_scores(model, evaluate, sc, metric="logit_diff", uncertainty=boot), task
    )
    _paired(curves, "eap-ig", boot, task)


def _rank_rows(makers: dict, curves, task: dict) -> dict:
    """Each ranking's scores (timed), its MIB curves, and a row of the table; the curves by method."""
    out = {}
    for method, make in makers.items():
        scores, wall, cpu = _cpu_timed(make)
        mib = out[method] = curves(scores)
        task["rows"].append(_row(method, scores, wall, mib, cpu))
        print(f"  {method} ({mib.level}s): CPR {mib.cpr.format()} CMD {mib.cmd.format()}; scores {wall:.1f} s, "
              f"{cpu:.1f} s CPU, curves {mib.seconds:.1f} s", flush=True)  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["embedded", "gemma3-270m"])
    ap.add_argument("--operations", nargs="+", default=["add", "sub"])
    ap.add_argument("--templates", type=int, default=2, help="equation templates per operation (1 or 2)")
    ap.add_argument("--generate", type=int, default=16, help="pairs generated per template before filtering")
    ap.add_argument("--pairs", type=int, default=8, help="pairs that make the scores")
    ap.add_argument("--eval-pairs", type=int, default=8, help="other pairs that score the curves")
    ap.add_argument("--steps", type=int, default=5, help="EAP-IG's steps (MIB's default)")
    ap.add_argument("--discover-seconds", type=float, default=60.0, help="discovery's CPU-time budget (0: no row)")
    ap.add_argument("--shrink", type=float, default=0.5, help="the search's smallest kept fraction per step")
    ap.add_argument("--search", action=argparse.BooleanOptionalAction, default=True, help="the search's row")
    ap.add_argument("--objective", choices=["mean", "pairs"], default="pairs", help="what judges the search's steps")
    ap.add_argument(
        "--min-wins", type=float, default=1.0,
        help="share of scoring pairs a search step must win to leave the start ranking's order (0: no guard)",
    )  # fmt: skip
    ap.add_argument(
        "--start", choices=["magnitude", "eap-ig"], default="magnitude",
        help="the ranking the search and the masks start from: EAP-IG by each pair's |effect|, or by the mean's",
    )  # fmt: skip
    ap.add_argument("--mask-steps", type=int, default=6, help="learned edge masks' gradient steps (0: no row)")
    ap.add_argument(
        "--mask-pairs",
        type=int,
        nargs="+",
        default=[0],
        help="scoring pairs the masks train on, a row each (a superset of --pairs; 0: the same pairs)",
    )
    ap.add_argument("--convergence-pairs", type=int, default=4)
    ap.add_argument("--convergence-steps", type=int, nargs="+", default=[1, 2, 5, 10, 20])
    ap.add_argument("--agree-receivers", type=int, default=2, help="receivers besides the logits (0 to 2)")
    ap.add_argument("--agree-pairs", type=int, default=4)
    ap.add_argument("--tiny-pairs", type=int, default=8)
    ap.add_argument("--peers-pairs", type=int, default=4)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--n-boot-rank", type=int, default=100, help="bootstrap of the rank agreements")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--level",
        choices=["edge", "node", "both"],
        default="both",
        help="MIB's edge level, node level, or both (node level alone where a family refuses edges)",
    )
    ap.add_argument("--tag", default="", help="appended to the results file's name")
    ap.add_argument("--replot", type=Path, help="a results file: write its figure and print its table, run nothing")
    args = ap.parse_args()
    if args.replot:
        done = json.loads(args.replot.read_text())
        print(f"wrote {figure(done, args.replot.with_suffix('.html'))}")
        print(markdown(done))
        return
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    out: dict = {"args": vars(args), "load_before": _load(), "started": datetime.now(timezone.utc).isoformat()}
    out["tasks"], out["tl_on_model"], out["direct_path"] = [], {}, {}
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"mib_{datetime.now(timezone.utc):%Y-%m-%d}{'_' + args.tag if args.tag else ''}.json"

    def save() -> None:  # after every step, so a run cut short keeps what it measured
        out["seconds"], out["load_now"] = time.perf_counter() - t0, _load()
        path.write_text(json.dumps(out, indent=1, default=str))

    if args.tiny_pairs:
        out["tiny"] = tiny_comparison(args)
        save()
    models: dict = {}
    for op in args.operations:  # both models on add first: a run cut short still covers both
        for name in args.models:
            if name not in models:
                models[name] = load_model(name)
            model = models[name]
            first = not out["tasks"]  # the convergence and the agreement with exact edges run on the first task
            task = run_task(model, name, op, args, extras=first)
            out["tasks"].append(task)
            save()
            if name not in out["tl_on_model"]:
                pairs = _pairs(model, op, [f"{op}_eq_1"], 4, args.seed)
                out["tl_on_model"][name] = tl_on_model(model, pairs)
                print(f"  TransformerLens edge attribution on {name}: {out['tl_on_model'][name]}", flush=True)
                save()
            if args.peers_pairs and not out["direct_path"]:
                out["direct_path"][name] = direct_path_compare(model, "add", "add_eq_1", args.peers_pairs, 2, 1)
                save()
    out["load_after"] = _load()
    save()
    figure(out, path.with_suffix(".html"))
    print(markdown(out))
    print(f"\nwrote {path}; {out['seconds']:.0f} s; load before {out['load_before']}, after {out['load_after']}")


def figure(out: dict, path: Path) -> Path | None:
    """MIB's CMD curve (f of the absolute ranking) of every edge-level row with its interval, one panel per task,
    as a standalone HTML file (plotly)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    tasks = [t for t in out["tasks"] if any(r.get("level") == "edge" and "f_absolute_low" in r for r in t["rows"])]
    if not tasks:
        return None
    fig = make_subplots(rows=1, cols=len(tasks), subplot_titles=[f"{t['model']} {t['operation']}" for t in tasks])
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#7f7f7f", "#ff7f0e"]
    for col, t in enumerate(tasks, start=1):
        rows = [r for r in t["rows"] if r.get("level") == "edge" and "f_absolute_low" in r]
        for k, r in enumerate(rows):
            x, c = [100 * p for p in r["percentages"]], colours[k % len(colours)]
            name = f"{r['method']} (CMD {r['cmd']['value']:.3f})"
            fig.add_trace(go.Scatter(x=x + x[::-1], y=r["f_absolute_high"] + r["f_absolute_low"][::-1],
                                     fill="toself", fillcolor=c, opacity=0.15, line={"width": 0},
                                     showlegend=False, hoverinfo="skip"), row=1, col=col)  # fmt: skip
            fig.add_trace(go.Scatter(x=x, y=r["f_absolute"], mode="lines+markers", line={"color": c}, name=name,
                                     legendgroup=r["method"]), row=1, col=col)  # fmt: skip
        fig.update_xaxes(type="log", title_text="% of edges kept", row=1, col=col)
        fig.update_yaxes(title_text="f on the evaluation pairs (95% interval)", row=1, col=col)
    fig.update_layout(width=560 * len(tasks), height=420, title="MIB's CMD curves: f of the top-n circuit")
    fig.write_html(str(path), include_plotlyjs="cdn")
    return path


def _fmt(iv: dict) -> str:
    return f"{iv['value']:.3f} [{iv['low']:.3f}, {iv['high']:.3f}]"


def markdown(out: dict) -> str:
    """The results as markdown tables."""
    lines = [
        "| model | op | method | level | CPR ↑ | CMD ↓ | CMD − EAP-IG's (paired) | edges or nodes | score time "
        "| score CPU | ms per item | curves time |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in out["tasks"]:
        if t.get("refused"):
            lines.append(f"| {t['model']} | {t['operation']} | (all) | edge | refused: {t['refused']} | | | | | | | |")
        for r in t["rows"]:
            diff = _fmt(r["cmd_minus_eap-ig"]) if "cmd_minus_eap-ig" in r else ""
            cpu = f"{r['score_cpu_seconds']:.1f} s" if r.get("score_cpu_seconds") is not None else ""
            lines.append(
                f"| {t['model']} | {t['operation']} | {r['method']} | {r.get('level', 'edge')} | {_fmt(r['cpr'])} | "
                f"{_fmt(r['cmd'])} | {diff} | "
                f"{r['n_edges']} | {r['score_seconds']:.1f} s | {cpu} | {r['ms_per_edge']:.3f} | "
                f"{r['eval_seconds']:.0f} s |"
            )
    tiny = out.get("tiny")
    if tiny:
        lines += ["", f"{tiny['model']}, {tiny['n_edges']} edges (TransformerLens' edge attribution runs here):", ""]
        lines += ["| method | CPR ↑ | CMD ↓ | score time | ms per edge |", "|---|---|---|---|---|"]
        for r in tiny["rows"]:
            lines.append(
                f"| {r['method']} | {_fmt(r['cpr'])} | {_fmt(r['cmd'])} | {r['score_seconds']:.2f} s | "
                f"{r['ms_per_edge']:.4f} |"
            )
        lines.append(
            f"\nSpearman of TransformerLens' edge scores with ours (EAP): {tiny['spearman_tl_vs_ours_eap']:.3f}"
        )
    for name, tl in out.get("tl_on_model", {}).items():
        lines.append(f"\nTransformerLens edge attribution on {name}: " + ("ran" if tl["ran"] else tl["refusal"]))
    for name, d in out.get("direct_path", {}).items():
        lines.append(
            f"\n{name}: exact edges {d['exact_ms_per_edge']:.1f} ms per edge, TransformerLens direct path "
            f"{d['tl_direct_path_ms_per_edge']:.1f} ms per edge: ratio {d['tl_over_exact_per_edge']:.1f}×"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
