"""Settings of circuit discovery and of the faithfulness curve, as a typed, self-checking config.

Both verbs take it whole (``discover_circuit(model, pairs, config=cfg)``, ``faithfulness(..., config=cfg)``)
and read the fields they use; each default is declared here only. It also says how the ``circuit`` stage
draws its pairs: per operation, correct pairs of the identification templates with the chosen
counterfactual, split into disjoint discovery and evaluation pairs (stratified by template), and a pool of
counterfactual prompts for the position-mean ablation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from mathcircuits._errors import FixableValueError
from mathcircuits._schema import check_fields, setting
from mathcircuits.data.generate import Counterfactual
from mathcircuits.patching import MetricName
from mathcircuits.stats import Uncertainty

__all__ = [
    "CircuitConfig",
]

#: Which components send edges (the ``senders`` choices of ``discover_circuit`` and ``CircuitConfig``).
EdgeSender: TypeAlias = Literal["head", "mlp"]
#: Which inputs of a node receive them.
ReceiverKind: TypeAlias = Literal["q", "k", "v", "mlp"]
#: Which positions are scanned: every position from the first difference, the prompt's token roles, or every
#: query token.
ScanPositions: TypeAlias = Literal["query", "roles", "suffix"]
#: How an edge is measured: the cached suffix-only method, or two plain forwards.
EdgeMethod: TypeAlias = Literal["exact", "reference"]
#: What a node outside the circuit takes: its paired counterfactual value, or a position-aligned pool mean.
AblationKind: TypeAlias = Literal["resample", "position_mean"]
#: MLPs outside the circuit: ablated like heads, or kept (recomputed).
MLPMode: TypeAlias = Literal["ablate", "keep"]
#: The primary evaluation: edge-level when edges were found (auto), or edge- or node-level.
EvalLevel: TypeAlias = Literal["auto", "edges", "nodes"]


@dataclass(frozen=True)
class CircuitConfig:
    """How to find each operation's circuit and how to measure its faithfulness curve."""

    enabled: bool = setting(True, "run the circuit stage (tens of minutes per operation on a CPU)")
    counterfactual: Counterfactual = setting(
        "operands", "operands: other operands, another answer (operand paths findable); operator: the paper's"
    )
    template_ids: tuple[str, ...] | None = setting(
        None, "templates the pairs come from; null: the data section's, without its held-out templates"
    )
    n_per_template: int = setting(24, "pairs generated per template before keeping the correct ones", ge=1)
    min_pairs: int = setting(30, "an operation with fewer correct pairs is skipped", ge=2)
    discovery_pairs: int = setting(16, "correct pairs the circuit is found on (spread over the templates)", ge=2)
    eval_pairs: int = setting(48, "other correct pairs the faithfulness curve is measured on (at most)", ge=2)
    pool_per_template: int = setting(48, "counterfactual prompts per template averaged by position_mean", ge=2)
    depth: int = setting(6, "budget: the most rounds after round 0 (saturation may stop earlier)", ge=0)
    saturation_tol: float | None = setting(
        0.05,
        "stop when a round adds less than this fraction of the largest |F| so far (floor 0.002); null: never",
        ge=0,
    )
    max_nodes: int | None = setting(80, "budget: stop once the circuit has this many nodes; null: none", ge=1)
    max_seconds: float | None = setting(
        None, "budget: stop expanding after this many CPU seconds (all threads); null: none", gt=0
    )
    threshold: float = setting(0.0, "smallest |mean effect| of an edge (metric units)", ge=0)
    top_k: int = setting(3, "at most this many edges per receiver", ge=1)
    logits_top_k: int = setting(6, "round 0: at most this many senders per answer position", ge=1)
    senders: tuple[EdgeSender, ...] = setting(("head", "mlp"), "which components send")
    receivers: tuple[ReceiverKind, ...] = setting(("q", "k", "v", "mlp"), "which inputs receive")
    positions: ScanPositions = setting(
        "query", "query: every position from the first difference; roles: A, B, op, last; suffix: after the prefix"
    )
    method: EdgeMethod = setting("exact", "exact: cached and suffix-only; reference: 2 forwards")
    screen: int | None = setting(
        10,
        "measure exactly only this many senders per receiver that the attribution screen ranks first; null: all",
        ge=1,
    )
    metric: MetricName = setting(
        "answer_logprob", "edge effect: the whole answer's log-probability (offset-free), or a first-token metric"
    )
    mlps: MLPMode = setting("ablate", "MLPs outside the circuit: ablated like heads, or kept")
    ablations: tuple[AblationKind, ...] = setting(
        ("resample", "position_mean"), "ablations side by side; the first is the primary one"
    )
    level: EvalLevel = setting("auto", "primary evaluation: edges when edges were found")
    points: int = setting(10, "at most this many circuit sizes on the curve", ge=2)
    n_random: int = setting(
        20,
        "depth-matched random circuits per size",
        ge=0,
        le=1000,
        why="each is one more faithfulness scoring per size",
    )
    plateau_tol: float = setting(
        0.05,
        "the plateau is the smallest size within this fraction of the curve's span (floor 0.005) of its maximum",
        ge=0,
    )
    min_gap: float = setting(0.1, "m(M) - m(cf) below this many nats is ill-conditioned", ge=0)
    completeness_sets: int = setting(8, "random removed sets K of the completeness test", ge=0)
    n_boot: int = setting(1000, "bootstrap resamples", ge=10)
    batch_size: int = setting(8, "pairs per batch", ge=1)

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.senders or not self.receivers or not self.ablations:
            raise FixableValueError(
                f"circuit.senders={list(self.senders)}, circuit.receivers={list(self.receivers)} and "
                f"circuit.ablations={list(self.ablations)} must each name at least one kind. ",
                "e.g. senders [head, mlp], receivers [q, k, v, mlp], ablations [resample, position_mean].",
            )
        if self.screen is not None and self.screen < self.top_k:
            raise FixableValueError(
                f"circuit.screen={self.screen} is below circuit.top_k={self.top_k}, so fewer edges would be measured "
                "exactly than are kept. ",
                "set screen >= top_k, or null to measure every sender.",
            )
        if self.discovery_pairs + 2 > self.min_pairs:
            raise FixableValueError(
                f"circuit.min_pairs={self.min_pairs} leaves fewer than 2 evaluation pairs after "
                f"circuit.discovery_pairs={self.discovery_pairs}. ",
                "raise min_pairs or lower discovery_pairs.",
            )

    def uncertainty(self, seed: int = 0) -> Uncertainty:
        """The bootstrap of the circuit's intervals: ``n_boot`` resamples from ``seed``."""
        return Uncertainty(n_boot=self.n_boot, seed=seed)
