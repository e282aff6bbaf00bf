"""Stage ``circuit`` — the whole circuit: sender → receiver path patching, discovery to saturation, faithfulness curves.

Map: edges (:mod:`.components`, :mod:`.batches`, :mod:`.pair_cache`, :mod:`.chain`, :mod:`.edges`,
:mod:`.reference`, :mod:`.attribution`); discovery (:mod:`.discover`, :mod:`.result`, :mod:`.roles`);
faithfulness (:mod:`.intervene`, :mod:`.pool`, :mod:`.subcircuits`, :mod:`.faithfulness`, :mod:`.curve`,
:mod:`.plateau`); MIB and attribution baselines (:mod:`.edge_scores`, :mod:`.mib`, :mod:`.mib_nodes`,
:mod:`.eap`, :mod:`.eap_compare`, :mod:`.graph_files`).
"""

from mathcircuits._checks import check_exports
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

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
