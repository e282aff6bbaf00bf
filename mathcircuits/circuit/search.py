"""Circuits searched on MIB's own objective: the exact faithfulness of whole circuits, not single-edge scores.

A single-edge ranking (EAP, EAP-IG, or every edge patched alone) scores each edge against the whole model; MIB's
curve then keeps the top-``n`` edges and patches all the others at once, where edges act together: two edges that
cancel each other both look important alone, and an edge whose sender is cut off upstream does nothing. This search
works on the circuit itself (Bhaskar et al. 2024, "Finding transformer circuits with edge pruning", do it with
learned masks; this is the greedy form).

**Backward elimination, re-linearised at the circuit.** Start from every edge (``f = 1``). At the kept set ``K``
the exact masked run (:mod:`.mib_run`) gives, in one forward and backward, ``∂m/∂w_e`` for every edge's keep
weight ``w_e`` (at ``K`` = the whole graph it *is* EAP; :func:`~.mib_run.masked_gradient`); removing edge ``e``
changes ``f`` by about ``δ_e = −∂f/∂w_e``. Each step removes edges down to the next size (at most ``1 − shrink``
of ``K``; every size of MIB's grid is a step), choosing among a few candidate removal sets — ordered by ``|δ_e|``,
by ``|δ_e|`` tilted towards edges whose removal moves ``f`` back towards 1, and by the attribution ranking the
search started from — the one whose **exact** ``|1 − f|`` on the scoring pairs is smallest (all candidates run in
one batched masked forward). Re-linearising after every step is what single-edge ranking lacks: once an edge's
upstream is cut its gradient is 0 and it goes next; of two cancelling edges, removing one moves ``f`` and the
exact check refuses it.

**Two edges that matter only together** (each carries the whole answer, so patching one alone moves nothing:
``plant_copy(model, readers=(), either=EITHER)``): the gradient is 0 for both, at the model and inside any circuit
that keeps one, and so is every single-edge score. The search keeps one of them only through a candidate that
holds them: the start ranking's order, where the start sees them (EAP-IG's path integral crosses the OR's ramp;
started from EAP the search loses them as any gradient step does).

The circuits are nested, so they are one ranking: an edge's score is the step that removed it (later: higher),
every edge scored; MIB's top-``n`` at each grid size is the searched circuit there. The signed and absolute
rankings coincide (the search aims at CMD's ``|1 − f|``; CPR is read from the same circuits).

Usage::

    found = search_circuits(model, score_pairs, start=eap_scores(model, score_pairs, "eap-ig"))
    found.scores            # EdgeScores for mib_scores(model, eval_pairs, found.scores)
    found.circuit(0.1)      # the edges kept at 10 %
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.circuit.batches import circuit_batches
from mathcircuits.circuit.edge_scores import EdgeKey, EdgeScores, graph_edges
from mathcircuits.circuit.mib import clean_readout
from mathcircuits.circuit.mib_metric import MIBMetric, mib_readout
from mathcircuits.circuit.mib_result import MIB_PERCENTAGES
from mathcircuits.circuit.mib_run import edge_masks, mask_index, masked_gradient, masked_run
from mathcircuits.circuit.wiring import resample_values
from mathcircuits.data.pairset import PairSet, pair_keys
from mathcircuits.models import HookedModel, PrefixCaches
from mathcircuits.models.families import block_structure

__all__ = [
    "SearchedCircuits",
    "search_circuits",
]

#: What judges a circuit on the scoring pairs (:meth:`CircuitObjective.judge`).
Objective = Literal["mean", "pairs"]

#: Tilts of the removal order towards edges whose removal moves ``f`` back to 1 (0: by ``|δ|`` alone).
TILTS: tuple[float, ...] = (0.0, 0.5, 0.9)


@dataclass(frozen=True, repr=False)
class SearchedCircuits:
    """The searched circuits as one ranking, and what the search measured on its own (scoring) pairs.

    ``scores``: every edge scored (the step that removed it). ``sizes``: edges kept after each step, ``f_score``:
    the exact ``f`` there on the scoring pairs, ``choice``: which candidate won (``"tilt 0.5"``, ``"start"``).
    ``evaluated``: whole circuits run exactly; ``objective``: what judged the candidates; ``min_wins``: the share of
    scoring pairs a candidate had to win to replace the start ranking's (:func:`search_circuits`). ``seconds``: wall;
    ``cpu_seconds``: this process's CPU time.
    """

    scores: EdgeScores
    sizes: tuple[int, ...]
    f_score: tuple[float, ...]
    choice: tuple[str, ...]
    evaluated: int
    objective: Objective
    min_wins: float
    seconds: float
    cpu_seconds: float

    def __repr__(self) -> str:
        return (
            f"SearchedCircuits({self.scores.model.name}, {len(self.sizes)} steps judged by {self.objective!r}, "
            f"{self.evaluated} circuits run, "
            f"{self.seconds:.0f} s)"
        )

    def circuit(self, fraction: float) -> frozenset[EdgeKey]:
        """The edges kept at ``fraction`` of the graph (MIB's ``int(p · |E|)``)."""
        n = int(fraction * len(self.scores))
        return frozenset(self.scores.edges[i] for i in self.scores.ranking(absolute=True)[:n])

    def f_at(self, n_edges: int) -> float:
        """The exact ``f`` on the scoring pairs of the circuit of ``n_edges`` edges (a step's size)."""
        if n_edges not in self.sizes:
            raise FixableValueError(f"no step kept {n_edges} edges. ", f"use one of {list(self.sizes)}.")
        return self.f_score[self.sizes.index(n_edges)]


def step_sizes(n_edges: int, percentages: Sequence[float], shrink: float) -> list[int]:
    """Kept-edge counts, decreasing: every grid size and enough between that no step keeps fewer than ``shrink``."""
    grid = sorted({int(p * n_edges) for p in percentages if 0 < int(p * n_edges) < n_edges}, reverse=True)
    out, n = [], n_edges
    for target in grid:  # a size of 0 is the empty circuit: nothing to search
        k = max(0, math.ceil(math.log(target / n) / math.log(shrink) - 1e-9) - 1)  # steps between, geometric
        out += [round(n * (target / n) ** (j / (k + 1))) for j in range(1, k + 1)]
        out.append(target)
        n = target
    return out


class CircuitObjective:
    """``f`` of circuits on the scoring pairs: exact runs of many circuits at once, and its gradient at one."""

    def __init__(self, model: HookedModel, pairs: PairSet, metric: MIBMetric, batch_size: int) -> None:
        self.model = model
        self.readouts = mib_readout(pairs, metric)
        self.batches = circuit_batches(model, pairs, "suffix", batch_size, rows=list(self.readouts.rows))
        self.store: PrefixCaches = {}
        self.values = [resample_values(model, b, self.store) for b in self.batches]
        self.edges = graph_edges(model.spec, block_structure(model).parallel)
        self.n_pairs = sum(len(b.idx) for b in self.batches)
        clean = torch.cat([clean_readout(model, b, self.readouts.of(b.idx), self.store) for b in self.batches])
        self.clean_pairs = clean.double()
        self.clean = float(self.clean_pairs.mean())
        self.empty = float(self.runs([set()])[0])
        self.evaluated = 0

    @property
    def gap(self) -> float:
        return self.clean - self.empty

    def check(self, start: EdgeScores | None) -> None:
        """Refuse a start ranking of another graph, and scoring pairs on which ``f`` is undefined."""
        if start is not None and start.edges != self.edges:
            raise FixableValueError(
                f"{start!r} does not score this model's graph in graph order. ",
                "score it with eap_scores(model, ...).",
            )
        if abs(self.gap) < 1e-9:
            raise FixableValueError(
                "the model and the counterfactual run score the same on these pairs: f is undefined. ",
                "pairs whose counterfactual changes the answer.",
            )

    def runs_by_pair(self, circuits: Sequence[set[int]]) -> Tensor:
        """``m`` of each circuit on each scoring pair: ``[circuit, pair]``."""
        masks = edge_masks(self.model.spec, self.edges, circuits)
        parts = [
            masked_run(self.model, b, v, masks, self.readouts.of(b.idx), store=self.store)
            for b, v in zip(self.batches, self.values)
        ]
        return torch.cat(parts, 1).double()

    def runs(self, circuits: Sequence[set[int]]) -> Tensor:
        """Mean ``m`` over the scoring pairs of each circuit: ``[circuit]``."""
        return self.runs_by_pair(circuits).mean(1)

    def f(self, circuits: Sequence[set[int]]) -> list[float]:
        self.evaluated += len(circuits)
        return ((self.runs(circuits) - self.empty) / self.gap).tolist()

    def judge(
        self, circuits: Sequence[set[int]], objective: Objective
    ) -> tuple[list[float], list[float], Float[Tensor, "circuit pair"]]:
        """Each circuit's ``f``, its distance from the model — ``|1 − f|`` (``"mean"``, MIB's CMD at one size) or
        the mean over pairs of ``|m_i(C) − m_i(model)| / |gap|`` (``"pairs"``: each pair's own answer kept) — and
        that distance pair by pair, ``|m_i(C) − m_i(model)|``."""
        self.evaluated += len(circuits)
        m = self.runs_by_pair(circuits)
        f = ((m.mean(1) - self.empty) / self.gap).tolist()
        per_pair = (m - self.clean_pairs).abs()
        if objective == "mean":
            return f, [abs(1 - x) for x in f], per_pair
        return f, (per_pair.mean(1) / abs(self.gap)).tolist(), per_pair

    def delta(self, kept: set[int], index: tuple[Tensor, Tensor]) -> Tensor:
        """``∂f/∂w_e`` at the circuit ``kept`` for every edge (graph order)."""
        keep = edge_masks(self.model.spec, self.edges, [kept])[0].float()
        total = torch.zeros_like(keep)
        for b, v in zip(self.batches, self.values):
            total += masked_gradient(self.model, b, v, keep, self.readouts.of(b.idx), store=self.store)[1]
        return (total[index] / self.n_pairs / self.gap).double()


def search_circuits(
    model: HookedModel,
    pairs: PairSet,
    *,
    start: EdgeScores | None = None,
    percentages: Sequence[float] = MIB_PERCENTAGES,
    metric: MIBMetric = "logit_diff",
    shrink: float = 0.5,
    tilts: Sequence[float] = TILTS,
    objective: Objective = "mean",
    min_wins: float = 0.0,
    batch_size: int = 8,
) -> SearchedCircuits:
    """Nested circuits at every size of ``percentages``, each chosen by its exact faithfulness on ``pairs``.

    Args:
        pairs: the scoring pairs (evaluate on others: :func:`~mathcircuits.circuit.mib_scores`).
        start: an attribution ranking of the whole graph; its order is one candidate at every step (None: not
            used). Its time is not counted here.
        percentages: the sizes to reach, fractions of the graph's edges (MIB's grid).
        shrink: each step keeps at least this fraction of the edges kept before it (0 < shrink < 1).
        tilts: the candidate removal orders besides ``start``'s (see :data:`TILTS`).
        objective: what picks a step's candidate: ``"mean"``, the circuit's ``|1 − f|`` on the scoring pairs (MIB's
            CMD at that size), or ``"pairs"``, its mean distance from the model's ``m`` pair by pair (no candidate
            wins by errors that cancel across the scoring pairs).
        min_wins: with a ``start``, the share of the scoring pairs on which a step's best candidate must be nearer
            the model's ``m`` than the start ranking's candidate to replace it (0: the best by ``objective`` wins;
            1: it must win on every pair, a sign test at ``2^-n`` on ``n`` pairs). The scoring pairs are few, and
            a candidate that is better on their mean by chance makes every smaller circuit worse on other pairs.
    """
    t0, c0 = time.perf_counter(), time.process_time()
    if not 0 < shrink < 1:
        raise FixableValueError(f"shrink {shrink} is outside (0, 1). ", "e.g. 0.5: no step removes half or more.")
    if not 0 <= min_wins <= 1:
        raise FixableValueError(f"min_wins {min_wins} is outside [0, 1]. ", "a share of the scoring pairs, e.g. 1.0.")
    pairs.require_model(model, "search_circuits")
    obj = CircuitObjective(model, pairs, metric, batch_size)
    edges, n_edges = obj.edges, len(obj.edges)
    obj.check(start)
    spec = model.spec
    index = mask_index(spec, edges)
    # host bookkeeping over the graph's edges (the masks go to the model's device where they are applied)
    start_key = None if start is None else torch.tensor(start.scores, dtype=torch.float64, device="cpu").abs()
    kept = torch.ones(n_edges, dtype=torch.bool, device="cpu")
    removed_at = torch.zeros(n_edges, dtype=torch.float64, device="cpu")
    order_key = torch.zeros(n_edges, dtype=torch.float64, device="cpu")
    f_now, sizes, fs, choices = 1.0, [], [], []
    for step, n in enumerate(step_sizes(n_edges, percentages, shrink)):
        delta = obj.delta(set(torch.nonzero(kept).flatten().tolist()), index)
        idx = torch.nonzero(kept).flatten()
        d = delta[idx]
        s = 1.0 if f_now < 1 else -1.0  # removing e moves f by -δ_e: helpful when -δ_e has the sign of 1 - f
        keys = {f"tilt {b}": d.abs() + b * s * d for b in tilts}
        if start_key is not None:
            keys["start"] = start_key[idx]
        drop = len(idx) - n
        candidates, names, removal = [], [], []
        for name, key in keys.items():
            first = idx[torch.argsort(key, stable=True)[:drop]]
            removal.append((first, key))
            c = kept.clone()
            c[first] = False
            candidates.append(set(torch.nonzero(c).flatten().tolist()))
            names.append(name)
        f, distance, per_pair = obj.judge(candidates, objective)
        best = min(range(len(f)), key=lambda j: distance[j])
        if "start" in names and names[best] != "start":  # the start's order stands unless beaten pair by pair
            home = names.index("start")
            if float((per_pair[best] < per_pair[home]).double().mean()) < min_wins:
                best = home
        first, key = removal[best]
        kept[first] = False
        removed_at[first] = step
        order_key[idx] = key.double()  # within a step, the edge removed first ranks lowest
        f_now = f[best]
        sizes.append(n)
        fs.append(f_now)
        choices.append(names[best])
    survivors = torch.nonzero(kept).flatten()
    if len(survivors):
        delta = obj.delta(set(survivors.tolist()), index)
        order_key[survivors] = delta[survivors].abs()
    # removal step first, then the order within the step, squeezed into (0, 1) so steps never interleave
    within = torch.sigmoid(order_key / (order_key.abs().max() + 1e-30) * 8)
    values = removed_at + within
    values[kept] = float(len(sizes) + 1) + within[kept]
    scores = EdgeScores(
        spec, block_structure(model).parallel, edges, tuple(values.tolist()), "search",
        time.perf_counter() - t0, metric, pair_keys=tuple(pair_keys(pairs)),
    )  # fmt: skip
    return SearchedCircuits(
        scores, tuple(sizes), tuple(fs), tuple(choices), obj.evaluated, objective, min_wins, time.perf_counter() - t0,
        time.process_time() - c0,
    )  # fmt: skip
