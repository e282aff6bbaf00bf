"""Faithfulness measured the way the circuit was found: a curve over circuit sizes, against random circuits.

Method (Wang et al. 2023, §4; Hanna et al. 2024; Miller et al. 2024 on why each choice matters). With
``m`` the whole answer's mean log-probability (teacher-forced), ``M`` the model and ``cf`` the
counterfactual run::

    F(C) = (m(C) − m(cf)) / (m(M) − m(cf))

``m(C)`` is the circuit run (:mod:`.intervene`). Two ablations side by side: ``resample`` (each pair's own
counterfactual, discovery's intervention: ``F(∅) = 0`` exactly) and ``position_mean`` (a position-aligned
pool mean, :mod:`.pool`; its empty circuit need not score 0, and the curve shows where it starts).

* **Denominator** ``m(M) − m(cf)``, with its interval. When the interval reaches 0 or it is below
  ``min_gap`` nats (0.1: the counterfactual moves the answer's probability by under ~10%), the result is
  ``ill-conditioned`` and gives no ratio.
* **Curve**: ``F`` of the top-n circuit (:mod:`.subcircuits`) for n from 0 to the whole (about geometric
  steps), at edge and node level, per ablation; plus ``n_random`` depth-matched random circuits per size
  (the random band, primary evaluation).
* **Plateau circuit** (:mod:`.plateau`). For it, per ablation: necessity ``F(M \\ C)`` (low = necessary),
  completeness ``F(C \\ K)`` against ``F(M \\ K)`` for random subsets ``K`` (Wang et al.: a complete circuit
  loses what the model loses), and minimality ``F(C) − F(C \\ {v})`` per node.

Intervals: percentile bootstrap of the ratio of means, over whole templates within operations when there
are ≥ :data:`~mathcircuits.stats.bootstrap.MIN_CLUSTERS` (5) per operation, else pairs; the same resamples for every
quantity, so differences are paired.

Usage::

    faith = faithfulness(model, eval_pairs, circuit, pool=pool_pairs)
    faith.summary(); faith.curve_frame()
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from mathcircuits._errors import FixableValueError
from mathcircuits._schema import configured, expect, expect_pairs
from mathcircuits.circuit.batches import CircuitBatch, circuit_batches
from mathcircuits.circuit.config import AblationKind, CircuitConfig, MLPMode, ScanPositions
from mathcircuits.circuit.curve import CompletenessRow, CurvePoint, Faithfulness, FaithfulnessSettings
from mathcircuits.circuit.intervene import AblationValues, Wiring, circuit_logprob, prefix_kv
from mathcircuits.circuit.pair_cache import position_scores
from mathcircuits.circuit.plateau import find_plateau
from mathcircuits.circuit.pool import pool_means, scored_operands
from mathcircuits.circuit.result import Circuit
from mathcircuits.circuit.subcircuits import edge_order, random_wiring, size_grid, top_wiring
from mathcircuits.circuit.wiring import ABLATION_KINDS, resample_values
from mathcircuits.data.pairset import PairSet
from mathcircuits.models import HookedModel, PrefixCaches, repeat_cache
from mathcircuits.models.families import block_structure
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.bootstrap import MIN_CLUSTERS, bootstrap_indices, cluster_bootstrap_indices

__all__ = [
    "faithfulness",
]

RULE = "ill-conditioned when m(M) - m(cf) < {min_gap} nats or its interval reaches 0"


class Scorer:
    """The scored pairs in batches, their clean and counterfactual runs, and the ablated values per ablation."""

    def __init__(
        self,
        model: HookedModel,
        pairs: PairSet,
        positions: ScanPositions,
        ablations: Sequence[AblationKind],
        pool: PairSet | None = None,
        mlps: MLPMode = "ablate",
        batch_size: int = 8,
    ) -> None:
        bad = [a for a in ablations if a not in ABLATION_KINDS]
        if bad or not ablations:
            raise FixableValueError(
                f"ablations {list(ablations)}: {bad or 'none'}. ", f"use some of {list(ABLATION_KINDS)}."
            )
        self.model, self.mlps = model, mlps
        self.batches = circuit_batches(model, pairs, positions, batch_size)
        self.rows = [i for b in self.batches for i in b.idx]
        self.store: PrefixCaches = {}
        self.clean = torch.cat([self._plain(b.tokens, b) for b in self.batches])
        self.cf = torch.cat([self._plain(b.cf_tokens, b) for b in self.batches])
        self.values: dict[str, list[AblationValues]] = {}
        for a in ablations:
            if a == "resample":
                self.values[a] = [resample_values(model, b, self.store) for b in self.batches]
            else:
                if pool is None:
                    raise FixableValueError(
                        "ablation 'position_mean' needs a pool of counterfactual prompts of the scored templates. ",
                        "pass pool=generate_pairs(...) with the same templates (more pairs than are scored).",
                    )
                means = pool_means(model, pool, exclude=scored_operands(pairs))
                self.values[a] = [means.values(b) for b in self.batches]
        self.templates = [t for b in self.batches for t in b.templates]
        self.operations = [o for b in self.batches for o in b.operations]

    @torch.no_grad()
    def _plain(self, tokens: torch.Tensor, b: CircuitBatch) -> torch.Tensor:
        start, n = b.prefix_len, b.answers.shape[1]
        kv = repeat_cache(prefix_kv(self.model, b.tokens, start, self.store), tokens.shape[0]) if start > 0 else None
        logits = (
            self.model.bridge(tokens[:, start:], past_key_values=kv) if kv is not None else self.model.bridge(tokens)
        )
        return position_scores(logits[:, -n:], b.answers)[1].sum(-1).float().cpu()

    def score(self, ablation: AblationKind, wirings: Sequence[Wiring]) -> torch.Tensor:
        """``[wiring, pair]`` log-probabilities, pairs in :attr:`rows` order."""
        if not wirings:
            return torch.empty(0, len(self.rows), device="cpu")
        parts = [
            circuit_logprob(self.model, b, v, wirings, self.mlps, store=self.store)
            for b, v in zip(self.batches, self.values[ablation])
        ]
        return torch.cat(parts, 1)


def _resamples(scorer: Scorer, uncertainty: Uncertainty) -> tuple[list[torch.Tensor], str]:
    """Cluster (template) resamples within operations when possible, else resamples of pairs."""
    n_boot, seed = uncertainty.n_boot, uncertainty.seed
    per_op: dict[str, set[str]] = {}
    for t, o in zip(scorer.templates, scorer.operations):
        per_op.setdefault(o, set()).add(t)
    if all(len(ts) >= MIN_CLUSTERS for ts in per_op.values()):  # fewer clusters undercover (stats.MIN_CLUSTERS)
        return cluster_bootstrap_indices(scorer.templates, scorer.operations, n_boot, seed), "templates"
    return list(bootstrap_indices(len(scorer.rows), n_boot, seed)), "pairs"


def ratio_intervals(
    num: torch.Tensor, den: torch.Tensor, resamples: Sequence[torch.Tensor], confidence: float
) -> list[Interval]:
    """Intervals of ``mean(num[q]) / mean(den)`` for each row ``q`` of ``num`` [Q, pair], on shared resamples."""
    value = num.double().mean(1) / den.double().mean()
    boots = torch.stack([num[:, i].double().mean(1) / den[i].double().mean() for i in resamples])  # [boot, Q]
    alpha = 1 - confidence
    qs = torch.quantile(boots, torch.tensor([alpha / 2, 1 - alpha / 2], dtype=boots.dtype, device="cpu"), dim=0)
    n = num.shape[1]
    return [
        Interval(float(value[q]), float(qs[0, q]), float(qs[1, q]), n, confidence, "ratio_bootstrap")
        for q in range(num.shape[0])
    ]


def _remove(wiring: Wiring, drop: set[tuple[str, int, int, str]]) -> Wiring:
    nodes = frozenset(n for n in wiring.nodes if n not in drop)
    edges = (
        None if wiring.edges is None else frozenset(e for e in wiring.edges if e[0] not in drop and e[1] not in drop)
    )
    return Wiring(nodes, edges)


def _name(key: tuple[str, int, int, str]) -> str:
    kind, layer, head, label = key
    return (f"L{layer}.H{head}" if kind == "head" else f"MLP{layer}") + f"@{label}"


def faithfulness(
    model: HookedModel,
    pairs: PairSet,
    circuit: Circuit,
    pool: PairSet | None = None,
    config: CircuitConfig | None = None,
    *,
    minimality_nodes: int = 100,
    uncertainty: Uncertainty | None = None,
    progress: bool = False,
    **settings: Any,
) -> Faithfulness:
    """The faithfulness curve of ``circuit`` on ``pairs`` (see the module docstring).

    Args:
        pairs: the scored pairs (keep them disjoint from the pairs that found the circuit).
        pool: counterfactual prompts for ``position_mean`` only (those with scored pairs' operands left out).
        config: the settings (the ``circuit`` section of a run); None: :class:`CircuitConfig`'s defaults. It
            reads ``ablations`` (the first is the primary one), ``level``, ``mlps``, ``points``, ``n_random``,
            ``plateau_tol``, ``min_gap``, ``completeness_sets``, ``batch_size`` and ``n_boot``; each field's
            meaning is its help there.
        minimality_nodes: minimality is measured when the plateau circuit has at most this many nodes.
        uncertainty: the bootstrap; its seed also draws the random circuits. None: ``config.uncertainty()``.
        **settings: fields of :class:`CircuitConfig` that replace the config's (``n_random=50``), checked by it.
    """
    pairs.require_model(model, "faithfulness")
    t0 = time.perf_counter()
    expect("faithfulness", "model", model, HookedModel, "a HookedModel", "pass mc.load_model(...)'s result")
    expect_pairs("faithfulness", "pairs", pairs, minimum=2)
    expect(
        "faithfulness", "circuit", circuit, Circuit, "a Circuit",
        "pass discover_circuit(model, pairs, key_heads)'s result; key heads alone are not a circuit",
    )  # fmt: skip
    cfg = configured("faithfulness", CircuitConfig, config, **settings)
    if uncertainty is None:
        uncertainty = cfg.uncertainty()
    else:
        configured("faithfulness", CircuitConfig, cfg, n_boot=uncertainty.n_boot)  # the config's range
    confidence, seed = uncertainty.confidence, uncertainty.seed
    circuit.check_model(model)
    positions = circuit.settings.positions
    scorer = Scorer(model, pairs, positions, list(cfg.ablations), pool, cfg.mlps, cfg.batch_size)
    resamples, over = _resamples(scorer, uncertainty)
    gap = scorer.clean - scorer.cf
    den = ratio_intervals(gap[None], torch.ones_like(gap), resamples, confidence)[0]
    denominator = Interval(den.value, den.low, den.high, len(gap), confidence, f"bootstrap over {over}")
    lvl = ("edges" if circuit.edges else "nodes") if cfg.level == "auto" else cfg.level
    primary = f"{cfg.ablations[0]}/{lvl}"
    rule = RULE.format(min_gap=cfg.min_gap)
    base = dict(
        model=model.spec, operations=tuple(sorted(set(scorer.operations))),
        templates=tuple(sorted(set(scorer.templates))),
        n_pairs=len(scorer.rows), denominator=denominator, clean=float(scorer.clean.mean()),
        counterfactual=float(scorer.cf.mean()), rule=rule, primary=primary, interval_over=over, confidence=confidence,
    )  # fmt: skip
    recorded = FaithfulnessSettings(
        ablations=list(cfg.ablations), level=lvl, mlps=cfg.mlps, points=cfg.points, n_random=cfg.n_random,
        plateau_tol=cfg.plateau_tol, min_gap=cfg.min_gap, completeness_sets=cfg.completeness_sets,
        minimality_nodes=minimality_nodes,
        n_boot=uncertainty.n_boot, seed=seed, positions=positions, metric="answer_logprob",
    )  # fmt: skip
    if abs(den.value) < cfg.min_gap or den.low <= 0 <= den.high:
        return Faithfulness(**base, ill_conditioned=True, settings=recorded, seconds=time.perf_counter() - t0)

    order = edge_order(circuit)
    n_max = len(order) if order else len([n for n in circuit.nodes if n.kind != "logits"])
    sizes = size_grid(n_max, cfg.points)
    levels = ["edges", "nodes"] if order else ["nodes"]
    parallel = block_structure(model).parallel
    spec = model.spec
    rng = random.Random(seed)
    keys = [f"{a}/{lv}" for a in cfg.ablations for lv in levels]
    values: dict[str, list[Interval]] = {}
    random_vals: list[tuple[float, ...]] = []
    for a in tqdm(cfg.ablations, disable=not progress, desc="faithfulness curve"):
        for lv in levels:
            scores = scorer.score(a, [top_wiring(circuit, order, n, lv) for n in sizes])
            values[f"{a}/{lv}"] = ratio_intervals(scores - scorer.cf, gap, resamples, confidence)
    a0 = cfg.ablations[0]
    for n in tqdm(sizes, disable=not progress, desc="random circuits"):
        if n == 0 or cfg.n_random == 0:
            random_vals.append(())
            continue
        draws = [
            random_wiring(circuit, order, n, lvl, rng, parallel, spec.n_heads, spec.n_layers)
            for _ in range(cfg.n_random)
        ]
        scores = scorer.score(a0, draws)
        random_vals.append(tuple(float(x) for x in ((scores - scorer.cf).mean(1) / gap.mean()).tolist()))
    curve = tuple(
        CurvePoint(
            size=n,
            n_nodes=len(top_wiring(circuit, order, n, lvl).nodes),
            faithfulness={k: values[k][i] for k in keys},
            random=random_vals[i],
            random_key=primary,
        )
        for i, n in enumerate(sizes)
    )
    size, reason, tol = find_plateau(
        sizes, [p.faithfulness[primary] for p in curve], [p.band(confidence)[2] for p in curve], cfg.plateau_tol
    )
    plateau = next(p for p in curve if p.size == size)
    whole = top_wiring(circuit, order, plateau.size, lvl)
    node_list = sorted(whole.nodes)
    plateau_nodes = tuple(_name(v) for v in node_list)
    mini = node_list if len(node_list) <= minimality_nodes else []
    necessity: dict[str, Interval] = {}
    minimality: dict[str, dict[str, Interval]] = {}
    completeness: list[CompletenessRow] = []
    subsets = []
    for _ in range(cfg.completeness_sets if len(node_list) > 1 else 0):
        k = [n for n in node_list if rng.random() < 0.5] or [rng.choice(node_list)]
        subsets.append(set(k))
    for a in cfg.ablations:
        wirings = [whole, Wiring(whole.nodes, None, complement=True)]
        wirings += [_remove(whole, {v}) for v in mini]
        wirings += [w for K in subsets for w in (_remove(whole, K), Wiring(frozenset(K), None, complement=True))]
        scores = scorer.score(a, wirings)
        necessity[a] = ratio_intervals(scores[1:2] - scorer.cf, gap, resamples, confidence)[0]
        drop = scores[2 : 2 + len(mini)]
        diffs = ratio_intervals(scores[:1] - drop, gap, resamples, confidence) if mini else []
        minimality[a] = {_name(v): d for v, d in zip(mini, diffs)}
        rest = scores[2 + len(mini) :]
        for j, K in enumerate(subsets):
            c_k, m_k = rest[2 * j], rest[2 * j + 1]
            pair = ratio_intervals(
                torch.stack([c_k - scorer.cf, m_k - scorer.cf, c_k - m_k]), gap, resamples, confidence
            )
            completeness.append(CompletenessRow(tuple(sorted(_name(v) for v in K)), a, *pair))
    edges_named = tuple(f"{e.sender} → {e.receiver} ({e.via})" for e in order[: plateau.size])
    return Faithfulness(
        **base,
        ill_conditioned=False,
        curve=curve,
        plateau_size=plateau.size,
        plateau_reason=reason,
        plateau_tolerance=tol,
        plateau_nodes=plateau_nodes,
        plateau_edges=edges_named,
        necessity=necessity,
        completeness=tuple(completeness),
        minimality=minimality,
        settings=recorded,
        seconds=time.perf_counter() - t0,
    )
