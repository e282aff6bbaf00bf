"""Settings of circuit discovery and faithfulness, as a typed, self-checking config.

Its fields are :func:`~mathcircuits.circuit.discover_circuit`'s and
:func:`~mathcircuits.circuit.faithfulness`'s own, so a run passes them unchanged
(:meth:`CircuitConfig.discover_kwargs`, :meth:`CircuitConfig.faithfulness_kwargs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from mathcircuits._schema import check_fields, setting
from mathcircuits.patching import MetricName

__all__ = ["CircuitConfig", "EdgeMethod", "EdgeSender", "ReceiverKind", "ScanPositions"]

#: Which components send edges (the ``senders`` choices of ``discover_circuit`` and ``CircuitConfig``).
EdgeSender: TypeAlias = Literal["head", "mlp"]
#: Which inputs of a node receive them.
ReceiverKind: TypeAlias = Literal["q", "k", "v", "mlp"]
#: Which positions are scanned: the prompt's token roles, or every query token.
ScanPositions: TypeAlias = Literal["roles", "suffix"]
#: How an edge is measured: the cached suffix-only method, or two plain forwards.
EdgeMethod: TypeAlias = Literal["exact", "reference"]


@dataclass(frozen=True)
class CircuitConfig:
    """How to find the circuit behind the key heads and how to score it."""

    enabled: bool = setting(True, "run the circuit stage (minutes per operation on a CPU)")
    key_heads: int = setting(3, "start from this many strongest key heads", ge=1)
    depth: int = setting(1, "rounds of 'which senders feed these nodes'", ge=0)
    threshold: float = setting(0.01, "smallest |mean effect| of an edge (metric units)", ge=0)
    top_k: int = setting(4, "at most this many edges per receiver", ge=1)
    senders: tuple[EdgeSender, ...] = setting(("head", "mlp"), "which components send")
    receivers: tuple[ReceiverKind, ...] = setting(("q", "k", "v", "mlp"), "which inputs receive")
    positions: ScanPositions = setting("roles", "roles: A, B, op, last; suffix: every query token")
    method: EdgeMethod = setting("exact", "exact: cached and suffix-only; reference: 2 forwards")
    screen: int | None = setting(
        None,
        "measure exactly only this many senders per receiver that the attribution screen ranks first; null: all",
        ge=1,
    )
    metric: MetricName = setting("relative_logit", "edge effect measure")
    max_pairs: int = setting(8, "correct pairs the edges are measured on", ge=2)
    faithfulness_pairs: int = setting(24, "correct pairs faithfulness is scored on", ge=2)
    n_random: int = setting(20, "random circuits of equal size", ge=0)
    n_boot: int = setting(1000, "bootstrap resamples over pairs", ge=10)
    batch_size: int = setting(8, "pairs per batch", ge=1)

    def __post_init__(self) -> None:
        check_fields(self)
        if not self.senders or not self.receivers:
            raise ValueError(
                f"circuit.senders={list(self.senders)} and circuit.receivers={list(self.receivers)}: both must name "
                "at least one kind, or nothing would be measured. Fix: e.g. senders [head, mlp], receivers [q, k, v]."
            )
        if self.screen is not None and self.screen < self.top_k:
            raise ValueError(
                f"circuit.screen={self.screen} is below circuit.top_k={self.top_k}, so fewer edges would be measured "
                "exactly than are kept. Fix: set screen >= top_k, or null to measure every sender."
            )

    def discover_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`~mathcircuits.circuit.discover_circuit`."""
        names = ("depth", "threshold", "top_k", "senders", "receivers", "positions", "method", "screen", "metric")
        return {k: getattr(self, k) for k in names} | {"n_boot": self.n_boot, "batch_size": self.batch_size}

    def faithfulness_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`~mathcircuits.circuit.faithfulness`."""
        return {"n_random": self.n_random, "n_boot": self.n_boot, "batch_size": self.batch_size}
