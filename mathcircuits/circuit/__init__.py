"""Stage ``circuit`` — the whole circuit: sender → receiver path patching, discovery to saturation, faithfulness curves.

* :mod:`.components`: :class:`Sender`, :class:`Receiver` (logits, a head's q/k/v, an MLP's input; GQA groups);
* :mod:`.batches`: teacher-forced batches of pairs and the labels of their positions (roles, offsets, answers);
* :mod:`.pair_cache`: a :class:`PairCache` of one batch (both runs, every position, the answer's tokens);
* :mod:`.chain`, :mod:`.edges`: :func:`exact_edges` (cached, suffix-only; the logits without a forward), checked
  at run time against :mod:`.reference`'s :func:`reference_edges` (two forwards per sender);
* :mod:`.attribution`: :func:`attribute_edges`, a first-order screen of the same edges, and :func:`screen_agreement`;
* :mod:`.discover`: :func:`discover_circuit`, from the logits round by round until faithfulness saturates;
* :mod:`.intervene`: the circuit run (node or edge level; resample or position-mean ablation);
* :mod:`.pool`: position-aligned means over a counterfactual pool;
* :mod:`.subcircuits`: top-n circuits and depth-matched random circuits of the same shape;
* :mod:`.faithfulness`, :mod:`.curve`: :func:`faithfulness` → :class:`Faithfulness` (the curve, its random band,
  necessity, completeness, minimality, the denominator and the ill-conditioned rule);
* :mod:`.edge_scores`, :mod:`.mib`: :class:`EdgeScores` (a signed score per edge of the whole graph) and
  :func:`mib_scores`, MIB's faithfulness over the edge-percentage grid, CPR and CMD;
* :mod:`.mib_nodes`: :func:`node_scores` → :class:`NodeScores` and :func:`mib_node_scores`, the same at node level
  (MIB's ``level="node"``; every family, Gemma's normed attention output included);
* :mod:`.eap`, :mod:`.eap_compare`: :func:`eap_scores`, EAP and EAP-IG scores of every edge as :class:`EdgeScores`;
  :func:`ig_convergence` and :func:`exact_agreement`, how they settle and how they rank beside exact edges;
  :func:`discovery_scores`, a discovered circuit's edges as the same record;
* :mod:`.graph_files`: :func:`write_graph` / :func:`read_graph`, EAP-IG / MIB graph JSON files;
* :mod:`.roles`: :func:`label_roles`, what each node does;
* :mod:`.config`: :class:`CircuitConfig`, the ``circuit`` section of a run.
"""

from mathcircuits.circuit.attribution import ScreenAgreement, attribute_edges, screen_agreement
from mathcircuits.circuit.batches import CircuitBatch, circuit_batches
from mathcircuits.circuit.components import Receiver, Sender, check_positions, upstream_senders
from mathcircuits.circuit.config import CircuitConfig
from mathcircuits.circuit.curve import CompletenessRow, CurvePoint, Faithfulness, FaithfulnessSettings
from mathcircuits.circuit.discover import discover_circuit
from mathcircuits.circuit.eap import ATTRIBUTION_METHODS, AttributionMethod, eap_scores, edge_attribution
from mathcircuits.circuit.eap_compare import (
    ExactAgreement,
    IGConvergence,
    discovery_scores,
    exact_agreement,
    ig_convergence,
)
from mathcircuits.circuit.edge_scores import INPUT, EdgeKey, EdgeScores, ScoreMethod, graph_edges
from mathcircuits.circuit.edges import check_edges, exact_edges, patched_inputs, receiver_effects
from mathcircuits.circuit.faithfulness import faithfulness
from mathcircuits.circuit.graph_files import GraphFile, read_graph, write_graph
from mathcircuits.circuit.intervene import AblationValues, Wiring, check_circuit_run, circuit_logprob, resample_values
from mathcircuits.circuit.mib import area_under, mib_scores, prune_edges
from mathcircuits.circuit.mib_metric import MIBMetric
from mathcircuits.circuit.mib_nodes import (
    NODE_METHODS,
    NodeMethod,
    NodeScores,
    graph_nodes_of,
    mib_node_scores,
    node_scores,
)
from mathcircuits.circuit.mib_result import MIB_PERCENTAGES, MIBScores
from mathcircuits.circuit.pair_cache import EdgeBatch, PairCache, pair_cache, position_scores
from mathcircuits.circuit.planted import MOVER, READER, copy_pairs, plant_copy, plant_two_step
from mathcircuits.circuit.plateau import PLATEAU_FLOOR, SATURATION_FLOOR, PlateauReason, find_plateau, round_saturated
from mathcircuits.circuit.pool import PoolMeans, pool_means
from mathcircuits.circuit.reference import reference_edges
from mathcircuits.circuit.result import Circuit, CircuitData, CircuitSettings, DiscoveryRound, Edge, Node
from mathcircuits.circuit.roles import label_roles
from mathcircuits.circuit.subcircuits import edge_order, random_wiring, size_grid, top_wiring, wiring_of
from mathcircuits.circuit.wiring import LOGITS

__all__ = [
    "ATTRIBUTION_METHODS",
    "INPUT",
    "LOGITS",
    "MIB_PERCENTAGES",
    "NODE_METHODS",
    "PLATEAU_FLOOR",
    "SATURATION_FLOOR",
    "MOVER",
    "READER",
    "AblationValues",
    "AttributionMethod",
    "Circuit",
    "CircuitBatch",
    "CircuitConfig",
    "CircuitData",
    "CircuitSettings",
    "CompletenessRow",
    "CurvePoint",
    "DiscoveryRound",
    "Edge",
    "EdgeBatch",
    "EdgeKey",
    "EdgeScores",
    "ExactAgreement",
    "Faithfulness",
    "FaithfulnessSettings",
    "GraphFile",
    "IGConvergence",
    "MIBMetric",
    "MIBScores",
    "Node",
    "NodeMethod",
    "NodeScores",
    "PairCache",
    "PlateauReason",
    "PoolMeans",
    "Receiver",
    "ScoreMethod",
    "ScreenAgreement",
    "Sender",
    "Wiring",
    "area_under",
    "attribute_edges",
    "check_circuit_run",
    "check_edges",
    "check_positions",
    "circuit_batches",
    "circuit_logprob",
    "copy_pairs",
    "discover_circuit",
    "discovery_scores",
    "eap_scores",
    "edge_attribution",
    "edge_order",
    "exact_agreement",
    "exact_edges",
    "faithfulness",
    "find_plateau",
    "graph_edges",
    "graph_nodes_of",
    "ig_convergence",
    "label_roles",
    "mib_node_scores",
    "mib_scores",
    "node_scores",
    "pair_cache",
    "patched_inputs",
    "plant_copy",
    "plant_two_step",
    "pool_means",
    "position_scores",
    "prune_edges",
    "random_wiring",
    "read_graph",
    "receiver_effects",
    "reference_edges",
    "resample_values",
    "round_saturated",
    "screen_agreement",
    "size_grid",
    "top_wiring",
    "upstream_senders",
    "wiring_of",
    "write_graph",
]
