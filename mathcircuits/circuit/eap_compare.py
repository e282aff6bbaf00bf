"""How EAP and EAP-IG rank edges beside exact edges, and how EAP-IG's scores settle as its steps grow.

:func:`ig_convergence` compares step counts with the most steps' (counts dividing the largest nest in its
grid, so each gradient is taken once). :func:`exact_agreement` compares EAP and EAP-IG with
:func:`~.edges.exact_edges` on sampled receivers, every sender patched at every position (a query receiver
at the last prompt position only), in the whole answer's log-probability. Exact edges also pass the MLPs
in between (:mod:`.eap`), so they need not agree even where attribution is exact.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import pandas as pd
import torch
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.circuit.attribution import ScreenAgreement, screen_agreement
from mathcircuits.circuit.batches import circuit_batches
from mathcircuits.circuit.chain import first_diff
from mathcircuits.circuit.components import Receiver, Sender
from mathcircuits.circuit.eap import DEFAULT_IG_STEPS, IGSteps, alpha_effects, graph_nodes, ig_alphas
from mathcircuits.circuit.edge_scores import INPUT, EdgeScores, graph_edges
from mathcircuits.circuit.edges import exact_edges
from mathcircuits.circuit.intervene import answer_logprob
from mathcircuits.circuit.mib_metric import MIBMetric, mib_readout
from mathcircuits.circuit.pair_cache import PairCache, pair_cache
from mathcircuits.circuit.result import Circuit
from mathcircuits.data.pairset import PairSet
from mathcircuits.models import HookedModel
from mathcircuits.models.families import block_structure
from mathcircuits.models.spec import check_model
from mathcircuits.patching.metrics import METRICS
from mathcircuits.stats import Uncertainty

__all__ = [
    "ExactAgreement",
    "IGConvergence",
    "exact_agreement",
    "ig_convergence",
]

_RANK_BOOT = Uncertainty(n_boot=200)  # a rank agreement's interval needs no finer quantiles


@dataclass(frozen=True)
class IGConvergence:
    """EAP-IG's scores at each step count beside those at the most steps (the last count is the reference: 1)."""

    steps: tuple[int, ...]
    agreement: tuple[ScreenAgreement, ...]
    n_edges: int
    n_pairs: int
    seconds: float

    def to_dataframe(self) -> pd.DataFrame:
        """One row per step count: Spearman, Kendall and top-k overlap with their intervals."""
        rows = []
        for n, a in zip(self.steps, self.agreement):
            row: dict[str, float] = {"steps": n}
            for name in ("spearman", "kendall", "top_k_overlap"):
                iv = getattr(a, name)
                row.update({name: iv.value, f"{name}_low": iv.low, f"{name}_high": iv.high})
            row["max_abs_diff"] = a.max_abs_diff
            rows.append(row)
        return pd.DataFrame(rows)

    def __repr__(self) -> str:
        rho = ", ".join(f"{n}: {a.spearman.value:.3f}" for n, a in zip(self.steps, self.agreement))
        return f"IGConvergence(Spearman with {self.steps[-1]} steps: {rho}; {self.n_edges} edges, {self.n_pairs} pairs)"


def _edge_index(model: HookedModel, parallel: bool) -> tuple[Tensor, Tensor]:
    senders, receivers = graph_nodes(model, parallel)
    si, ri = {s: j for j, s in enumerate(senders)}, {r: j for j, r in enumerate(receivers)}
    edges = graph_edges(model.spec, parallel)
    return torch.tensor([si[s] for s, _ in edges], device="cpu"), torch.tensor([ri[r] for _, r in edges], device="cpu")


def _caches(model: HookedModel, pairs: PairSet, rows: list[int], batch_size: int):
    for b in circuit_batches(model, pairs, "suffix", batch_size, rows=rows):
        P = b.n_prompt
        yield b, pair_cache(model, b.tokens[:, :P], b.cf_tokens[:, :P], b.answers[:, 0], answers=b.answers)


def ig_convergence(
    model: HookedModel,
    pairs: PairSet,
    steps: Sequence[IGSteps] = (1, 2, 5, 10, 20),
    metric: MIBMetric = "logit_diff",
    k: int = 20,
    uncertainty: Uncertainty = _RANK_BOOT,
    batch_size: int = 8,
) -> IGConvergence:
    """EAP-IG's edge scores at each of ``steps`` (increasing, at least two) against those at the most steps."""
    pairs.require_model(model, "ig_convergence")
    counts = [int(n) for n in steps]
    if len(counts) < 2 or counts != sorted(set(counts)) or counts[0] < 1:
        raise FixableValueError(
            f"steps {list(steps)} must be two or more increasing counts ≥ 1. ", "e.g. (1, 2, 5, 10, 20)."
        )
    t0 = time.perf_counter()
    readouts = mib_readout(pairs, metric)
    si, ri = _edge_index(model, block_structure(model).parallel)
    alphas = sorted({Fraction(j, n) for n in counts for j in range(n)})
    per: dict[int, list[Tensor]] = {n: [] for n in counts}
    for b, cache in _caches(model, pairs, list(readouts.rows), batch_size):
        acc = {n: 0.0 for n in counts}
        grid = alpha_effects(model, cache, readouts.of(b.idx), [float(a) for a in alphas])
        for a, eff in zip(alphas, grid):
            for n in counts:
                if (a * n).denominator == 1:  # a = j/n for some j
                    acc[n] = acc[n] + eff / n
        for n in counts:
            per[n].append(acc[n][:, si, ri])  # [pair, edge] in graph order
    ref = torch.cat(per[counts[-1]])
    agreement = tuple(
        screen_agreement(torch.cat(per[n]), ref, k=min(k, ref.shape[1]), uncertainty=uncertainty) for n in counts
    )
    return IGConvergence(tuple(counts), agreement, ref.shape[1], ref.shape[0], time.perf_counter() - t0)


@dataclass(frozen=True)
class ExactAgreement:
    """EAP's and EAP-IG's effects beside exact edges on a sample of receivers (metric: the answer's log-probability).

    ``n_edges`` excludes the input; ``seconds``: wall time of all three methods on these receivers' batches.
    """

    receivers: tuple[str, ...]
    n_edges: int
    eap: ScreenAgreement
    eap_ig: ScreenAgreement
    steps: int
    seconds: dict[str, float]

    def to_dataframe(self) -> pd.DataFrame:
        rows = []
        for name, a in (("eap", self.eap), ("eap-ig", self.eap_ig)):
            row: dict[str, object] = {"method": name}
            for stat in ("spearman", "kendall", "top_k_overlap"):
                iv = getattr(a, stat)
                row.update({stat: iv.value, f"{stat}_low": iv.low, f"{stat}_high": iv.high})
            rows.append(row)
        return pd.DataFrame(rows)


def _pick(model: HookedModel, parallel: bool, receivers: int | Sequence[Receiver], seed: int) -> list[Receiver]:
    if not isinstance(receivers, int):
        return [r.check(model.spec) for r in receivers]
    pool = [r for r in graph_nodes(model, parallel)[1] if r.kind != "logits" and r.layer > 0]
    return [Receiver("logits"), *random.Random(seed).sample(pool, min(receivers, len(pool)))]


def exact_agreement(
    model: HookedModel,
    pairs: PairSet,
    receivers: int | Sequence[Receiver] = 6,
    steps: IGSteps = DEFAULT_IG_STEPS,
    k: int = 10,
    uncertainty: Uncertainty = _RANK_BOOT,
    batch_size: int = 8,
) -> ExactAgreement:
    """EAP and EAP-IG against exact edges on the logits and ``receivers`` drawn at random (or these receivers).

    ``uncertainty.seed`` also draws the receivers.
    """
    pairs.require_model(model, "exact_agreement")
    parallel = block_structure(model).parallel
    chosen = _pick(model, parallel, receivers, uncertainty.seed)
    senders, all_receivers = graph_nodes(model, parallel)
    col = {r: j for j, r in enumerate(all_receivers)}
    metric = METRICS["answer_logprob"]
    seconds = {"exact": 0.0, "eap": 0.0, "eap-ig": 0.0}
    parts: dict[str, list[Tensor]] = {"exact": [], "eap": [], "eap-ig": []}
    for b, cache in _caches(model, pairs, list(range(len(pairs))), batch_size):
        every = list(range(first_diff(cache), cache.tokens.shape[1]))
        last = b.n_prompt - 1
        attributed = {}
        for name, alphas in (("eap", ig_alphas("eap", steps)), ("eap-ig", ig_alphas("eap-ig", steps))):
            t = time.perf_counter()
            attributed[name] = [_mean(model, cache, alphas, None)]
            if any(r.kind == "q" for r in chosen):
                attributed[name].append(_mean(model, cache, alphas, [last]))
            seconds[name] += time.perf_counter() - t
        ex, at = [], {"eap": [], "eap-ig": []}
        for r in chosen:
            up = [s for s in senders[1:] if r.is_downstream_of(s, parallel)]
            where = Receiver("q", r.layer, head=r.head, position=last) if r.kind == "q" else r
            t = time.perf_counter()
            ex.append(exact_edges(model, cache, where, up, every, metric).effects)
            seconds["exact"] += time.perf_counter() - t
            for name in at:
                grid = attributed[name][1 if r.kind == "q" else 0]
                at[name].append(grid[:, 1 : 1 + len(up), col[r]])
        parts["exact"].append(torch.cat(ex, 1))
        for name in at:
            parts[name].append(torch.cat(at[name], 1))
    exact = torch.cat(parts["exact"])
    kk = min(k, exact.shape[1])
    agree = {n: screen_agreement(torch.cat(parts[n]), exact, k=kk, uncertainty=uncertainty) for n in ("eap", "eap-ig")}
    return ExactAgreement(tuple(r.name for r in chosen), exact.shape[1], agree["eap"], agree["eap-ig"], steps, seconds)


def _mean(model: HookedModel, cache: PairCache, alphas: list, positions: list[int] | None) -> Tensor:
    return sum(alpha_effects(model, cache, answer_logprob, alphas, positions)) / len(alphas)


def discovery_scores(circuit: Circuit, model: HookedModel, rest: EdgeScores) -> EdgeScores:
    """A discovered circuit's edges, connected to the input, ranked first; ``rest`` (an attribution) orders the others.

    Discovery keeps the token embeddings clean, so its circuit has no input edges; MIB's pruning would then drop it
    whole. Here every receiver of a discovered node (a head's query, its KV group's key and value, an MLP's input)
    also gets the input edge, ranked just below the discovered edges; the discovered edges rank by their summed
    effect (the logits edges of every answer position count as one). Every other edge keeps ``rest``'s order,
    scaled below them. ``parts`` says which stretch is which: ``(("exact", n), (rest.method, |E| − n))``.
    """
    circuit.check_model(model)
    check_model(rest.model, model, "these edge scores", "rank this model's edges")
    parallel = block_structure(model).parallel
    edges = graph_edges(model.spec, parallel)
    if rest.edges != edges:
        raise FixableValueError(f"{rest!r} is not in graph order. ", "score every edge with eap_scores(model, ...).")
    nodes = {n.name: n for n in circuit.nodes}
    g = model.spec.group_size
    kept: dict[tuple, float] = {}
    for e in circuit.edges:
        s, r = nodes[e.sender], nodes[e.receiver]
        sender = Sender("head", s.layer, s.head) if s.kind == "head" else Sender("mlp", s.layer)
        if e.via == "logits":
            receiver = Receiver("logits")
        elif e.via in ("k", "v"):
            receiver = Receiver(e.via, r.layer, group=r.head // g)
        elif e.via == "q":
            receiver = Receiver("q", r.layer, head=r.head)
        else:
            receiver = Receiver("mlp", r.layer)
        kept[(sender, receiver)] = kept.get((sender, receiver), 0.0) + abs(e.effect)
    inputs = set()
    for n in circuit.nodes:
        if n.kind == "head":
            inputs |= {Receiver("q", n.layer, head=n.head)}
            inputs |= {Receiver(k, n.layer, group=n.head // g) for k in ("k", "v")}
        elif n.kind == "mlp":
            inputs.add(Receiver("mlp", n.layer))
    top = max((abs(x) for x in rest.scores), default=0.0) + 1.0
    values = []
    for e, x in zip(edges, rest.scores):
        if e in kept:
            values.append(2 * top + kept[e])
        elif e[0] == INPUT and e[1] in inputs:
            values.append(top + abs(x) / top)
        else:
            values.append(x)
    n_exact = sum(1 for e in edges if e in kept or (e[0] == INPUT and e[1] in inputs))
    parts = (("exact", n_exact), (rest.method, len(edges) - n_exact))
    return EdgeScores(
        model.spec, parallel, edges, tuple(values), "exact", circuit.seconds + rest.seconds, circuit.metric,
        pair_keys=rest.pair_keys, parts=parts,
    )  # fmt: skip
