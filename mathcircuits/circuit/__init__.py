"""Stage ``circuit`` — the whole circuit: sender → receiver path patching, discovery to saturation, faithfulness curves.

Map: edges (:mod:`.components`, :mod:`.batches`, :mod:`.pair_cache`, :mod:`.chain`, :mod:`.edges`,
:mod:`.reference`, :mod:`.attribution`); discovery (:mod:`.discover`, :mod:`.result`, :mod:`.roles`);
faithfulness (:mod:`.intervene`, :mod:`.pool`, :mod:`.subcircuits`, :mod:`.faithfulness`, :mod:`.curve`,
:mod:`.plateau`); MIB and attribution baselines (:mod:`.edge_scores`, :mod:`.mib`, :mod:`.mib_nodes`,
:mod:`.eap`, :mod:`.eap_compare`, :mod:`.graph_files`); circuits found on whole circuits: the search
(:mod:`.search`) and learned edge masks (:mod:`.masks`).
"""

from mathcircuits._checks import check_exports
from mathcircuits.circuit.attribution import ScreenAgreement, attribute_edges, screen_agreement
from mathcircuits.circuit.batches import CircuitBatch, circuit_batches
from mathcircuits.circuit.components import Receiver, Sender, upstream_senders
from mathcircuits.circuit.config import CircuitConfig
from mathcircuits.circuit.curve import CompletenessRow, CurvePoint, Faithfulness, FaithfulnessSettings
from mathcircuits.circuit.discover import discover_circuit
from mathcircuits.circuit.eap import AttributionMethod, eap_scores
from mathcircuits.circuit.eap_compare import ExactAgreement, IGConvergence, exact_agreement, ig_convergence
from mathcircuits.circuit.edge_scores import INPUT, EdgeScores, ScoreMethod, graph_edges
from mathcircuits.circuit.edges import exact_edges
from mathcircuits.circuit.faithfulness import faithfulness
from mathcircuits.circuit.graph_files import GraphFile, read_graph, write_graph
from mathcircuits.circuit.masks import LearnedMasks, learn_edge_masks
from mathcircuits.circuit.mib import mib_scores, paired_difference
from mathcircuits.circuit.mib_metric import MIBMetric
from mathcircuits.circuit.mib_nodes import NodeMethod, NodeScores, mib_node_scores, node_scores
from mathcircuits.circuit.mib_result import MIBScores
from mathcircuits.circuit.pair_cache import EdgeBatch, PairCache, pair_cache
from mathcircuits.circuit.planted import copy_pairs, plant_two_step
from mathcircuits.circuit.plateau import PlateauReason
from mathcircuits.circuit.reference import reference_edges
from mathcircuits.circuit.result import Circuit, CircuitData, CircuitSettings, DiscoveryRound, Edge, Node
from mathcircuits.circuit.roles import label_roles
from mathcircuits.circuit.search import SearchedCircuits, search_circuits
from mathcircuits.circuit.wiring import LOGITS

__all__ = [
    "INPUT",
    "LOGITS",
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
    "EdgeScores",
    "ExactAgreement",
    "Faithfulness",
    "FaithfulnessSettings",
    "GraphFile",
    "IGConvergence",
    "LearnedMasks",
    "MIBMetric",
    "MIBScores",
    "Node",
    "NodeMethod",
    "NodeScores",
    "PairCache",
    "PlateauReason",
    "Receiver",
    "ScoreMethod",
    "ScreenAgreement",
    "SearchedCircuits",
    "Sender",
    "attribute_edges",
    "circuit_batches",
    "copy_pairs",
    "discover_circuit",
    "eap_scores",
    "exact_agreement",
    "exact_edges",
    "faithfulness",
    "graph_edges",
    "ig_convergence",
    "label_roles",
    "learn_edge_masks",
    "mib_node_scores",
    "mib_scores",
    "node_scores",
    "pair_cache",
    "paired_difference",
    "plant_two_step",
    "read_graph",
    "reference_edges",
    "screen_agreement",
    "search_circuits",
    "upstream_senders",
    "write_graph",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
