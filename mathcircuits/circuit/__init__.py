"""Stage 3b — the whole circuit: sender → receiver path patching, circuit discovery, faithfulness.

* :mod:`.components`: :class:`Sender`, :class:`Receiver` (logits, a head's q/k/v, an MLP's input; GQA groups);
* :mod:`.edges`: :func:`exact_edges` (cached, suffix-only) and :func:`reference_edges` (two forwards per sender).
"""

from mathcircuits.circuit.components import Receiver, Sender, check_positions, upstream_senders
from mathcircuits.circuit.edges import EdgeBatch, PairCache, exact_edges, pair_cache, reference_edges

__all__ = [
    "EdgeBatch",
    "PairCache",
    "Receiver",
    "Sender",
    "check_positions",
    "exact_edges",
    "pair_cache",
    "reference_edges",
    "upstream_senders",
]
