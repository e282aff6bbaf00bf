"""Edge masks learned on MIB's CMD: one logit per edge, trained through the exact masked run, read as a ranking.

Edge pruning (Bhaskar et al. 2024, "Finding transformer circuits with edge pruning") gives every edge a
continuous keep weight, runs the model with each receiver reading ``resid − Σ_s (1 − w_{s→r}) Δ_s``
(:func:`~.mib_run.soft_masked_run`) and trains the weights to keep the output faithful under a sparsity penalty.
MIB's CMD scores a whole *ranking*, not one circuit: ``CMD = Σ_k a_k |1 − f(C_k)|`` over the grid sizes ``n_k``
(``a_k`` the trapezoid weight of ``p_k``; the circuits nested). So here the sparsity is not a penalty but the
grid itself, and one logit ``θ_e`` per edge serves every size:

* the circuit at size ``n_k`` keeps ``w_e = σ((θ_e − τ_k) / T)``, ``τ_k`` midway between the ``n_k``-th and
  ``(n_k+1)``-th largest ``θ`` (held fixed in the step), so ranking by ``θ`` is the hard top-``n_k`` circuit at
  every size;
* ``θ`` starts from an attribution ranking (rank ``r`` of ``N``: ``θ = logit(1 − (r + ½)/N)``, so near a size
  ``T`` is a *relative* width in rank: the band of edges a step can reorder is a factor ``e^{±2T}`` around it);
* each step runs the soft circuits of the sizes that contribute most to the start ranking's CMD on the scoring
  pairs (``a_k |1 − f_k|``) in one batched forward and backward and moves ``θ`` down the gradient of
  ``L = Σ_k a_k |1 − f_k|`` by a Polyak step ``lr · L / ‖∇L‖²`` (the linear model would remove ``lr`` of ``L``);
  a step that raises ``L`` is taken back and halved, and the logits with the lowest ``L`` are the result;
* at the end the hard circuits of the learned ranking are run on the scoring pairs; where their CMD is not lower
  than the start ranking's, the start ranking is kept (``kept == "start"``; the scoring pairs decide, never the
  evaluation pairs).

Every edge is scored (``θ`` shifted positive), so :func:`~.mib.mib_scores` reads it like any other ranking.

Usage::

    ig = eap_scores(model, score_pairs, "eap-ig")
    learned = learn_edge_masks(model, score_pairs, start=ig)
    mib_scores(model, eval_pairs, learned.scores)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.circuit.edge_scores import EdgeKey, EdgeScores
from mathcircuits.circuit.mib import area_under, prune_edges
from mathcircuits.circuit.mib_metric import MIBMetric
from mathcircuits.circuit.mib_result import MIB_PERCENTAGES
from mathcircuits.circuit.mib_run import mask_index, soft_masked_run
from mathcircuits.circuit.search import CircuitObjective
from mathcircuits.data.pairset import PairSet, pair_keys
from mathcircuits.models import HookedModel
from mathcircuits.models.families import block_structure

__all__ = [
    "LearnedMasks",
    "learn_edge_masks",
]


@dataclass(frozen=True, repr=False)
class LearnedMasks:
    """The learned ranking and what training measured on its own (scoring) pairs.

    ``scores``: every edge scored by its final logit. ``sizes``: the edge counts trained; ``loss``: the soft
    circuits' ``Σ a_k |1 − f_k|`` at each step; ``cmd_start`` / ``cmd_learned``: the hard circuits' CMD on the
    scoring pairs of the start ranking and of the learned one; ``kept``: ``"learned"`` or ``"start"`` (whichever
    is lower); ``grid_sizes`` / ``f_grid``: the kept ranking's circuit at each size of the grid (edges, MIB's
    ``int(p · |E|)``) and its exact ``f`` on the scoring pairs. ``seconds``: wall; ``cpu_seconds``: this process's
    CPU time (the start ranking's not counted).
    """

    scores: EdgeScores
    sizes: tuple[int, ...]
    loss: tuple[float, ...]
    cmd_start: float
    cmd_learned: float
    kept: str
    grid_sizes: tuple[int, ...]
    f_grid: tuple[float, ...]
    seconds: float
    cpu_seconds: float

    def __repr__(self) -> str:
        return (
            f"LearnedMasks({self.scores.model.name}, {len(self.loss)} steps at {list(self.sizes)} edges, scoring CMD "
            f"{self.cmd_start:.3f} → {self.cmd_learned:.3f}, kept {self.kept}, {self.seconds:.0f} s)"
        )

    def circuit(self, fraction: float) -> frozenset[EdgeKey]:
        """The circuit at ``fraction`` of the graph: the top ``int(p · |E|)`` edges, pruned, as :meth:`f_at` ran it."""
        top = set(self.scores.ranking(absolute=True)[: int(fraction * len(self.scores))])
        return frozenset(
            self.scores.edges[i] for i in prune_edges(self.scores.edges, top, self.scores.model.group_size)
        )

    def f_at(self, n_edges: int) -> float:
        """The exact ``f`` on the scoring pairs of the kept ranking's circuit of ``n_edges`` edges (a grid size)."""
        if n_edges not in self.grid_sizes:
            raise FixableValueError(
                f"the grid has no size of {n_edges} edges. ", f"use one of {list(self.grid_sizes)}."
            )
        return self.f_grid[self.grid_sizes.index(n_edges)]


def _weights(grid: Sequence[float]) -> list[float]:
    """Each grid point's weight in the trapezoid area over ``grid`` (MIB's CMD is ``Σ weight · |1 − f|``)."""
    return [
        ((grid[k] - grid[k - 1]) if k > 0 else 0.0) / 2 + ((grid[k + 1] - grid[k]) if k + 1 < len(grid) else 0.0) / 2
        for k in range(len(grid))
    ]


def _hard_cmd(obj: CircuitObjective, theta: Tensor, grid: Sequence[float]) -> tuple[float, list[float]]:
    """CMD on the scoring pairs of the ranking by ``theta`` (MIB's pruned top-``n`` circuits) and ``f`` per size."""
    n_edges, g = len(obj.edges), obj.model.spec.group_size
    order = torch.argsort(-theta.detach(), stable=True).tolist()
    sizes = [int(p * n_edges) for p in grid]
    inner = [k for k, n in enumerate(sizes) if n < n_edges]
    f = [1.0] * len(grid)
    for k, value in zip(inner, obj.f([prune_edges(obj.edges, set(order[: sizes[k]]), g) for k in inner])):
        f[k] = value
    ys = torch.tensor([abs(1 - x) for x in f], dtype=torch.float64, device="cpu")
    return float(area_under(grid, ys)), f


def learn_edge_masks(
    model: HookedModel,
    pairs: PairSet,
    *,
    start: EdgeScores,
    percentages: Sequence[float] = MIB_PERCENTAGES,
    steps: int = 6,
    sizes: int = 3,
    temperature: float = 0.5,
    lr: float = 0.5,
    metric: MIBMetric = "logit_diff",
    batch_size: int = 8,
) -> LearnedMasks:
    """A ranking of every edge whose top-``n`` circuits are trained to be faithful at MIB's sizes on ``pairs``.

    Args:
        pairs: the scoring pairs (evaluate on others: :func:`~mathcircuits.circuit.mib_scores`).
        start: the attribution ranking the logits start from (e.g. EAP-IG; its time is not counted here).
        percentages: MIB's grid, fractions of the graph's edges, increasing, ending at 1.
        steps: gradient steps; each runs ``sizes`` soft circuits forward and backward on every scoring pair.
        sizes: how many grid sizes each step trains (those adding most to the start ranking's CMD).
        temperature: the soft mask's width in logit units (log-rank near the size).
        lr: the fraction of the soft loss each step aims to remove along the gradient (a Polyak step); a step that
            raises the loss is taken back and halved.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    if steps < 0 or sizes < 1 or temperature <= 0 or lr <= 0:
        raise FixableValueError(
            f"steps={steps}, sizes={sizes}, temperature={temperature}, lr={lr}: need steps ≥ 0, sizes ≥ 1 and a "
            "positive temperature and lr. ",
            "e.g. steps=6, sizes=3, temperature=0.5, lr=0.5.",
        )
    grid = [float(p) for p in percentages]
    if not grid or grid != sorted(set(grid)) or grid[-1] != 1.0 or grid[0] <= 0:
        raise FixableValueError(f"percentages {list(percentages)} must increase within (0, 1] to 1. ", "use MIB's.")
    pairs.require_model(model, "learn_edge_masks")
    obj = CircuitObjective(model, pairs, metric, batch_size)
    edges, n_edges, spec = obj.edges, len(obj.edges), model.spec
    obj.check(start)
    # the logits live with the model; the ranking bookkeeping is host-side
    rank = torch.empty(n_edges, dtype=torch.float64, device="cpu")
    rank[torch.tensor(start.ranking(absolute=True), dtype=torch.long, device="cpu")] = torch.arange(
        n_edges, dtype=torch.float64, device="cpu"
    )
    q = 1 - (rank + 0.5) / n_edges
    theta0 = torch.log(q / (1 - q)).to(model.device, torch.float32)
    cmd_start, f_start = _hard_cmd(obj, theta0, grid)
    weight = _weights(grid)
    counts = [int(p * n_edges) for p in grid]
    useful = [k for k, n in enumerate(counts) if 0 < n < n_edges]
    chosen = sorted(useful, key=lambda k: -weight[k] * abs(1 - f_start[k]))[:sizes]
    chosen = [k for k in chosen if weight[k] * abs(1 - f_start[k]) > 0]
    f_idx, b_idx = (i.to(model.device) for i in mask_index(spec, edges))
    n_f = 1 + spec.n_layers * (spec.n_heads + 1)
    n_b = spec.n_layers * (spec.n_heads + 2 * spec.n_kv_heads + 1) + 1
    a = torch.tensor([weight[k] for k in chosen], dtype=torch.float32, device=model.device)
    theta, losses = theta0.clone(), []
    best = (float("inf"), theta0, torch.zeros_like(theta0), 0.0)  # (loss, logits, gradient, step length) at the best
    fraction = lr
    for _ in range(steps if chosen else 0):
        theta.requires_grad_(True)
        ordered = torch.sort(theta.detach(), descending=True).values
        tau = torch.stack([(ordered[counts[k] - 1] + ordered[counts[k]]) / 2 for k in chosen])
        w = torch.sigmoid((theta[None] - tau[:, None]) / temperature)  # [size, edge]
        keep = torch.zeros(len(chosen), n_f, n_b, dtype=w.dtype, device=model.device)
        keep[:, f_idx, b_idx] = w
        with torch.enable_grad():
            total = sum(
                soft_masked_run(model, b, v, keep, obj.readouts.of(b.idx), obj.store).sum(1)
                for b, v in zip(obj.batches, obj.values)
            )
            f = (total / obj.n_pairs - obj.empty) / obj.gap
            loss = (a * (1 - f).abs()).sum()
            (grad,) = torch.autograd.grad(loss, theta)
        losses.append(float(loss.detach()))
        if losses[-1] < best[0]:  # a Polyak step: the linear model would remove `fraction` of the loss
            eta = fraction * losses[-1] / float(grad.pow(2).sum().clamp_min(1e-30))
            best = (losses[-1], theta.detach(), grad, eta)
        else:  # the last step overshot: back to the best logits, half the step along their gradient
            fraction /= 2
            best = (*best[:3], best[3] / 2)
        theta = (best[1] - best[3] * best[2]).detach()
    theta = best[1] if losses else theta0
    cmd_learned, f_learned = _hard_cmd(obj, theta, grid) if losses else (cmd_start, f_start)
    kept = "learned" if cmd_learned < cmd_start else "start"
    final = (theta if kept == "learned" else theta0).detach().double()
    values = final - final.min() + 1.0  # positive: the signed and absolute rankings are the logits' order
    scores = EdgeScores(
        spec, block_structure(model).parallel, edges, tuple(values.tolist()), "edge-masks",
        time.perf_counter() - t0, metric, pair_keys=tuple(pair_keys(pairs)),
    )  # fmt: skip
    return LearnedMasks(
        scores, tuple(counts[k] for k in chosen), tuple(losses), cmd_start, cmd_learned, kept, tuple(counts),
        tuple(f_learned if kept == "learned" else f_start), time.perf_counter() - t0, time.process_time() - c0,
    )  # fmt: skip
