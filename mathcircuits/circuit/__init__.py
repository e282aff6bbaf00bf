"""Stage ``circuit`` — the whole circuit: sender → receiver path patching, circuit discovery, faithfulness.

* :mod:`.components`: :class:`Sender`, :class:`Receiver` (logits, a head's q/k/v, an MLP's input; GQA groups);
* :mod:`.pair_cache`: a :class:`PairCache` of one batch (both runs, every position);
* :mod:`.edges`: :func:`exact_edges` (cached, suffix-only), checked at run time against :mod:`.reference`'s
  :func:`reference_edges` (two forwards per sender);
* :mod:`.attribution`: :func:`attribute_edges`, a first-order screen of the same edges, and :func:`screen_agreement`
  (Spearman correlation and top-k overlap with the exact edges);
* :mod:`.discover`: :func:`discover_circuit`, iterated from the key heads into a :class:`Circuit`;
* :mod:`.faithfulness`: :func:`faithfulness` (with minimality and random circuits of equal size);
* :mod:`.roles`: :func:`label_roles`, what each node does;
* :mod:`.config`: :class:`CircuitConfig`, the ``circuit`` section of a run.
"""

from mathcircuits.circuit.attribution import ScreenAgreement, attribute_edges, screen_agreement
from mathcircuits.circuit.components import Receiver, Sender, check_positions, upstream_senders
from mathcircuits.circuit.config import CircuitConfig
from mathcircuits.circuit.discover import discover_circuit
from mathcircuits.circuit.edges import check_edges, exact_edges, patched_inputs, receiver_effects
from mathcircuits.circuit.faithfulness import answer_logprob, faithfulness
from mathcircuits.circuit.pair_cache import EdgeBatch, PairCache, pair_cache
from mathcircuits.circuit.reference import reference_edges
from mathcircuits.circuit.result import (
    Circuit,
    CircuitData,
    CircuitSettings,
    Edge,
    Faithfulness,
    FaithfulnessSettings,
    Node,
)
from mathcircuits.circuit.roles import label_roles

__all__ = [
    "Circuit",
    "CircuitData",
    "CircuitSettings",
    "CircuitConfig",
    "Edge",
    "EdgeBatch",
    "Faithfulness",
    "FaithfulnessSettings",
    "Node",
    "PairCache",
    "Receiver",
    "ScreenAgreement",
    "Sender",
    "answer_logprob",
    "attribute_edges",
    "check_edges",
    "check_positions",
    "discover_circuit",
    "exact_edges",
    "faithfulness",
    "label_roles",
    "pair_cache",
    "patched_inputs",
    "receiver_effects",
    "reference_edges",
    "screen_agreement",
    "upstream_senders",
]
