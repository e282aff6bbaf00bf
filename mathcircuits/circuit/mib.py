"""MIB's circuit metrics on our graph: faithfulness over the edge-percentage grid, CPR and CMD, with intervals.

Definitions (Mueller et al., "MIB", ICML 2025, circuit track; read in ``hannamw/MIB-circuit-track``,
``MIB_circuit_track/evaluation.py`` ``evaluate_area_under_curve``, and EAP-IG's ``Graph.apply_topn`` /
``prune`` / ``evaluate_graph``):

* the circuit ``C_k`` keeps the ``n_k = int(p_k · |E|)`` highest-ranked edges of the whole graph, then is
  **pruned** (repeatedly drop a node without a kept outgoing edge, or without a kept incoming one — the input
  excepted — and every edge touching a dropped node; the logits always stay);
* edges outside ``C_k`` are patched with the counterfactual's activations: a receiver reads
  ``resid − Σ_{s → r ∉ C}(out_s − out_s^cf)`` (our edge-level run, :mod:`.intervene`, with the input as a sender);
* ``f(C) = (m(C) − m(∅)) / (m(N) − m(∅))``, ``m`` a mean over pairs, ``∅`` the top-0 circuit (every edge
  patched: the counterfactual run), ``N`` the model;
* grid ``p = 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100 %`` of the edges;
* **CPR** = Σ trapezoids of ``f`` over ``x = p`` (a fraction, linear axis, not rescaled: the grid spans 0.999),
  edges ranked by signed score (higher is better); **CMD** = the same area of ``|1 − f|``, edges ranked by
  ``|score|`` (lower is better).

``m`` is ``"logit_diff"`` — MIB's logit difference, logit(answer) − logit(counterfactual answer), read where the
two answers first differ (MIB reads the last prompt token because its answers are one token; on a digit-split
tokenizer nearly every sum is several tokens, so the shared leading digits are teacher-forced and the first
differing digit is compared: **MIB-style**, not MIB's official numbers) — or ``"answer_logprob"``, our whole
answer's log-probability.

Intervals: percentile bootstrap over whole templates within operations when every operation has at least
:data:`~mathcircuits.stats.bootstrap.MIN_CLUSTERS` templates, else over pairs; every point, CPR and CMD from the same
resamples. Positions: every position after the few-shot prefix (identical in both prompts, so nothing to patch).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from functools import partial
from typing import Any, Literal

import torch
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.circuit.batches import CircuitBatch, circuit_batches
from mathcircuits.circuit.edge_scores import EdgeKey, EdgeScores, graph_edges
from mathcircuits.circuit.intervene import LOGITS, RunScore, Wiring, answer_logprob, circuit_logprob
from mathcircuits.circuit.mib_metric import MIBMetric, mib_readout
from mathcircuits.circuit.mib_result import MIB_PERCENTAGES, CurveSummary, MIBScores, PairCurves
from mathcircuits.circuit.mib_run import edge_masks, masked_run
from mathcircuits.circuit.wiring import NodeKey, input_node, prefix_kv, resample_values
from mathcircuits.data.pairset import PairSet, pair_keys
from mathcircuits.models import HookedModel, PrefixCaches, compare, model_depth, repeat_cache, verify_once
from mathcircuits.models.families import block_structure
from mathcircuits.models.spec import check_model
from mathcircuits.stats import Interval, IntervalMethod, Uncertainty
from mathcircuits.stats.bootstrap import MIN_CLUSTERS, bootstrap_indices, cluster_bootstrap_indices
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY

__all__ = [
    "mib_scores",
    "paired_difference",
]

Comp = tuple[str, int, int]  # (kind, layer, head): a node of the position-free graph


def _sender_node(edge: EdgeKey) -> Comp:
    s = edge[0]
    return (s.kind, s.layer, s.head)


def _receiver_nodes(edge: EdgeKey, group_size: int) -> list[Comp]:
    r = edge[1]
    if r.kind == "logits":
        return [("logits", -1, -1)]
    if r.kind == "mlp":
        return [("mlp", r.layer, -1)]
    if r.kind == "q":
        return [("head", r.layer, r.head)]
    return [("head", r.layer, h) for h in range(r.group * group_size, (r.group + 1) * group_size)]


def prune_edges(edges: Sequence[EdgeKey], kept: set[int], group_size: int) -> set[int]:
    """MIB's ``prune``: drop nodes without a kept outgoing or incoming edge (input, logits exempt) to a fixed point.

    A KV group's key/value edge enters every query head of the group; it stays while one of them stays.
    """
    kept = set(kept)
    while True:
        out = {_sender_node(edges[i]) for i in kept}
        into = {n for i in kept for n in _receiver_nodes(edges[i], group_size)} | {("input", -1, -1)}
        nodes = (out & into) | {("logits", -1, -1)}
        new = {
            i
            for i in kept
            if _sender_node(edges[i]) in nodes and any(n in nodes for n in _receiver_nodes(edges[i], group_size))
        }
        if new == kept:
            return kept
        kept = new


def _wiring(edges: Sequence[EdgeKey], kept: set[int], labels: Sequence[str], group_size: int) -> Wiring:
    """The circuit of ``kept`` edges at every position label, the input a sender (edges outside it patched)."""
    comps = {_sender_node(edges[i]) for i in kept if edges[i][0].kind != "input"}
    nodes = frozenset((k, layer, head, lab) for k, layer, head in comps for lab in labels)
    wired: set[tuple[NodeKey, NodeKey, str]] = set()
    for i in kept:
        s, r = edges[i]
        for lab in labels:
            sk: NodeKey = input_node(lab) if s.kind == "input" else (s.kind, s.layer, s.head, lab)
            if r.kind == "logits":
                wired.add((sk, LOGITS, "logits"))
                continue
            for k, layer, head in _receiver_nodes(edges[i], group_size):
                if (k, layer, head) in comps:
                    wired.add((sk, (k, layer, head, lab), r.kind))
    return Wiring(nodes, frozenset(wired), input=True)


def area_under(x: Sequence[float], y: Tensor) -> Tensor:
    """Trapezoid area of ``y`` [..., point] over ``x`` (MIB's loop in ``evaluate_area_under_curve``)."""
    xs = torch.tensor(list(x), dtype=y.dtype, device=y.device)
    return ((xs[1:] - xs[:-1]) * (y[..., 1:] + y[..., :-1]) / 2).sum(-1)


def _check(model: HookedModel, b: Any, values: Any, order: list[int]) -> tuple[float, float]:
    """Masked vs position-wise run on one batch: the empty circuit and the smallest surviving top-n (n = 32, 64, …)."""
    labels, g = sorted(b.where), model.spec.group_size
    edges = graph_edges(model.spec, block_structure(model).parallel)
    small: set[int] = set()
    n = 32
    while not small and n <= len(order):
        small, n = prune_edges(edges, set(order[:n]), g), 2 * n
    circuits = [set(), small]
    fast = masked_run(model, b, values, edge_masks(model.spec, edges, circuits), answer_logprob)
    plain = circuit_logprob(model, b, values, [_wiring(edges, c, labels, g) for c in circuits])
    return compare(fast, plain, model.dtype, model_depth(model))


def clean_readout(model: HookedModel, b: CircuitBatch, readout: RunScore, store: PrefixCaches) -> Tensor:
    """``m`` of each pair of a batch on the unpatched model (the query suffix on the prefix's cached keys/values)."""
    start = b.prefix_len
    kv = repeat_cache(prefix_kv(model, b.tokens, start, store), b.tokens.shape[0]) if start > 0 else None
    with torch.no_grad():
        logits = model.bridge(b.tokens[:, start:], past_key_values=kv) if kv is not None else model.bridge(b.tokens)
    return readout(logits[:, -b.answers.shape[1] :], b.answers).float().cpu()


def warn_on_choosing_pairs(caller: str, pairs: PairSet, made_on: Sequence[str], what: str) -> None:
    """Warn when ``pairs`` include pairs that made the scores being evaluated (``made_on``: their pair keys)."""
    mine = set(made_on)
    shared = sum(k in mine for k in pair_keys(pairs)) if mine else 0
    if shared:
        warnings.warn(
            f"{caller} evaluates on {shared} of {len(pairs)} pairs that made the {what} scores: {what}s ranked high "
            "because they matter on these pairs look more faithful on them than they are (selection bias). "
            "Fix: evaluate on fresh pairs, e.g. mc.fresh_pairs(model, pairs, n=32).",
            UserWarning,
            stacklevel=3,
        )


def mib_scores(
    model: HookedModel,
    pairs: PairSet,
    scores: EdgeScores,
    *,
    metric: MIBMetric = "logit_diff",
    percentages: Sequence[float] = MIB_PERCENTAGES,
    uncertainty: Uncertainty | None = DEFAULT_UNCERTAINTY,
    batch_size: int = 8,
    run: Literal["masked", "positions"] = "masked",
    check: bool = True,
) -> MIBScores:
    """MIB's faithfulness curves, CPR and CMD of an edge ranking on ``pairs`` (see the module docstring).

    ``pairs``: disjoint from those that made the scores (``cf_answer_tokens`` for ``logit_diff``).
    ``percentages``: fractions of the graph's edges in (0, 1], increasing. ``uncertainty`` None: no
    intervals. ``run``: ``"masked"`` (:mod:`.mib_run`, one einsum per layer) or ``"positions"`` (the
    position-wise reference, :mod:`.intervene`, slow on large graphs). ``check``: before first use on a
    model, compare the two runs on two circuits.
    """
    t0 = time.perf_counter()
    spec = model.spec
    check_model(scores.model, model, "these edge scores", "score this model's edges")
    pairs.require_model(model, "mib_scores")
    warn_on_choosing_pairs("mib_scores", pairs, scores.pair_keys, "edge")
    readouts = mib_readout(pairs, metric)
    grid = [float(p) for p in percentages]
    if not grid or any(not 0 < p <= 1 for p in grid) or grid != sorted(set(grid)):
        raise FixableValueError(
            f"percentages {list(percentages)} must increase within (0, 1]. ", "use MIB_PERCENTAGES."
        )
    parallel = block_structure(model).parallel
    if parallel != scores.parallel or not scores.is_whole_graph:
        raise FixableValueError(
            f"{scores!r} does not score the whole graph of {spec.describe()} (parallel={parallel}): MIB's "
            "percentages are of every edge. ",
            "score every edge of graph_edges(spec, parallel) (0 for none).",
        )
    batches = circuit_batches(model, pairs, "suffix", batch_size, rows=list(readouts.rows))
    labels = sorted({lab for b in batches for lab in b.where})
    edges = scores.edges
    if run not in ("masked", "positions"):
        raise FixableValueError(f"run {run!r} is unknown. ", "use 'masked' or 'positions'.")
    n_edges = len(edges)
    g = spec.group_size
    rankings = {"signed": scores.ranking(absolute=False), "absolute": scores.ranking(absolute=True)}
    circuits: list[set[int]] = [set()]  # the top-0 circuit first: every edge patched
    kept_counts: dict[str, list[int]] = {}
    full: list[tuple[str, int]] = []  # (ranking, grid index) of circuits that keep every edge: the model itself
    for name, order in rankings.items():
        kept_counts[name] = []
        for k, p in enumerate(grid):
            kept = prune_edges(edges, set(order[: int(p * n_edges)]), g)
            kept_counts[name].append(len(kept))
            if len(kept) == n_edges:
                full.append((name, k))
            else:
                circuits.append(kept)
    masks = edge_masks(spec, edges, circuits) if run == "masked" else None
    store: PrefixCaches = {}
    parts_run, parts_clean = [], []
    for b in batches:
        readout = readouts.of(b.idx)
        values = resample_values(model, b, store)
        if masks is not None:
            if check:
                check_run = partial(_check, model, b, values, rankings["absolute"])
                verify_once(model.bridge, "MIB masked run", check_run)
            parts_run.append(masked_run(model, b, values, masks, readout, store=store))
        else:
            wirings = [_wiring(edges, c, labels, g) for c in circuits]
            parts_run.append(circuit_logprob(model, b, values, wirings, store=store, readout=readout))
        parts_clean.append(clean_readout(model, b, readout, store))
    run = torch.cat(parts_run, 1).double()  # [wiring, pair]
    clean = torch.cat(parts_clean).double()
    empty = run[0]
    per_ranking: dict[str, Tensor] = {}
    at = 1
    for name in rankings:
        cols = []
        for k in range(len(grid)):
            if (name, k) in full:
                cols.append(clean)
            else:
                cols.append(run[at])
                at += 1
        per_ranking[name] = torch.stack(cols)  # [point, pair]
    templates = [t for b in batches for t in b.templates]
    operations = [o for b in batches for o in b.operations]
    rows = [r for b in batches for r in b.idx]
    summary = curve_summary(per_ranking, empty, clean, templates, operations, grid, uncertainty, rows)
    return MIBScores.from_curves(
        summary,
        model=spec,
        method=scores.method,
        metric=metric,
        percentages=tuple(grid),
        n_edges=n_edges,
        kept_signed=tuple(kept_counts["signed"]),
        kept_absolute=tuple(kept_counts["absolute"]),
        clean=float(clean.mean()),
        counterfactual=float(empty.mean()),
        n_pairs=len(clean),
        dropped=readouts.dropped,
        score_seconds=scores.seconds,
        seconds=time.perf_counter() - t0,
    )


def curve_summary(
    per_ranking: dict[str, Tensor],
    empty: Tensor,
    clean: Tensor,
    templates: Sequence[str],
    operations: Sequence[str],
    grid: Sequence[float],
    uncertainty: Uncertainty | None,
    rows: Sequence[int] = (),
) -> CurveSummary:
    """The curves and their intervals (the module docstring's bootstrap), from ``m`` per pair:
    ``per_ranking[name]`` [point, pair], ``empty`` and ``clean`` [pair]; ``rows``: the pairs' rows in their set."""
    resamples, over = _resamples(templates, operations, len(clean), uncertainty)
    u = uncertainty or DEFAULT_UNCERTAINTY  # None: no resamples; the NaN intervals keep the default level
    confidence, seed = u.confidence, u.seed
    everything = [torch.arange(len(clean), device="cpu")] + list(resamples)

    def curves(idx: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        zero, top = empty[idx].mean(), clean[idx].mean()
        f = {name: (c[:, idx].mean(1) - zero) / (top - zero) for name, c in per_ranking.items()}
        return f["signed"], f["absolute"], top - zero

    draws = [curves(i) for i in everything]
    f_signed = torch.stack([d[0] for d in draws])
    f_abs = torch.stack([d[1] for d in draws])
    gap = torch.stack([d[2] for d in draws])
    cpr = area_under(grid, f_signed)
    cmd = area_under(grid, (1 - f_abs).abs())
    q = torch.tensor([(1 - confidence) / 2, (1 + confidence) / 2], dtype=torch.float64, device="cpu")
    method: IntervalMethod = {"none": "none", "templates": "cluster_bootstrap", "pairs": "pair_bootstrap_fallback"}[
        over
    ]

    def interval(x: Tensor) -> Interval:
        lo, hi = torch.quantile(x[1:], q).tolist() if len(x) > 1 else (float("nan"), float("nan"))
        return Interval(float(x[0]), lo, hi, len(clean), confidence, method, seed)

    per_pair = PairCurves(
        signed=tuple(tuple(x) for x in per_ranking["signed"].tolist()),
        absolute=tuple(tuple(x) for x in per_ranking["absolute"].tolist()),
        clean=tuple(clean.tolist()),
        empty=tuple(empty.tolist()),
        rows=tuple(int(r) for r in rows),
        templates=tuple(templates),
        operations=tuple(operations),
    )
    return CurveSummary(
        faithfulness_signed=tuple(interval(f_signed[:, k]) for k in range(len(grid))),
        faithfulness_absolute=tuple(interval(f_abs[:, k]) for k in range(len(grid))),
        cpr=interval(cpr),
        cmd=interval(cmd),
        denominator=interval(gap),
        interval_over=over,
        per_pair=per_pair,
    )


def _resamples(
    templates: Sequence[str], operations: Sequence[str], n: int, uncertainty: Uncertainty | None
) -> tuple[list[Tensor], str]:
    """The module docstring's resamples: whole templates within operations when each has enough, else pairs."""
    per_op: dict[str, set[str]] = {}
    for t, o in zip(templates, operations):
        per_op.setdefault(o, set()).add(t)
    if uncertainty is None:
        return [], "none"
    n_boot, seed = uncertainty.n_boot, uncertainty.seed
    if all(len(ts) >= MIN_CLUSTERS for ts in per_op.values()):
        return cluster_bootstrap_indices(templates, operations, n_boot, seed), "templates"
    return list(bootstrap_indices(n, n_boot, seed)), "pairs"


def paired_difference(
    a: MIBScores, b: MIBScores, uncertainty: Uncertainty = DEFAULT_UNCERTAINTY
) -> tuple[Interval, Interval]:
    """``(CMD of a − CMD of b, CPR of a − CPR of b)`` with intervals from the same resamples of the same pairs.

    A paired bootstrap: each resample draws pairs (or templates) once and recomputes both rankings' curves on them,
    so what the two evaluations share (the pairs' difficulty) cancels. Both must come from one evaluation set and
    grid (:func:`mib_scores` or :func:`~.mib_nodes.mib_node_scores` on the same pairs).
    """
    pa, pb = a.per_pair, b.per_pair
    if pa is None or pb is None or pa.rows != pb.rows or a.percentages != b.percentages:
        raise FixableValueError(
            f"{a!r} and {b!r} were not evaluated on the same pairs and grid. ",
            "evaluate both rankings with the same pairs and percentages (this version of mib_scores keeps them).",
        )
    clean = torch.tensor(pa.clean, dtype=torch.float64, device="cpu")  # host bookkeeping: saved per-pair values
    if not torch.allclose(clean, torch.tensor(pb.clean, dtype=torch.float64, device="cpu"), rtol=1e-4, atol=1e-4):
        raise FixableValueError(
            "the two evaluations read different clean scores: not the same pairs, or not the same model. ",
            "evaluate both rankings on the same pairs of the same model.",
        )
    empty = torch.tensor(pa.empty, dtype=torch.float64, device="cpu")
    curves = {
        f"{who} {kind}": torch.tensor(getattr(p, kind), dtype=torch.float64, device="cpu")
        for who, p in (("a", pa), ("b", pb))
        for kind in ("signed", "absolute")
    }
    resamples, over = _resamples(pa.templates, pa.operations, len(clean), uncertainty)
    grid = a.percentages

    def draw(idx: Tensor) -> tuple[float, float]:
        zero, top = empty[idx].mean(), clean[idx].mean()
        f = {k: (c[:, idx].mean(1) - zero) / (top - zero) for k, c in curves.items()}
        cmd = area_under(grid, (1 - f["a absolute"]).abs()) - area_under(grid, (1 - f["b absolute"]).abs())
        cpr = area_under(grid, f["a signed"]) - area_under(grid, f["b signed"])
        return float(cmd), float(cpr)

    draws = torch.tensor(
        [draw(i) for i in [torch.arange(len(clean), device="cpu"), *resamples]], dtype=torch.float64, device="cpu"
    )
    q = torch.tensor(
        [(1 - uncertainty.confidence) / 2, (1 + uncertainty.confidence) / 2], dtype=torch.float64, device="cpu"
    )
    method: IntervalMethod = "cluster_bootstrap" if over == "templates" else "pair_bootstrap_fallback"

    def interval(x: Tensor) -> Interval:
        lo, hi = torch.quantile(x[1:], q).tolist()
        return Interval(float(x[0]), lo, hi, len(clean), uncertainty.confidence, method, uncertainty.seed)

    return interval(draws[:, 0]), interval(draws[:, 1])
