"""Stage ``identify`` — path patching from heads/MLPs to the logits, and key components.

``path_patch(model, pairs)`` (:mod:`.driver`) is the entry point: the exact method, scoring the whole
answer's teacher-forced log-probability, by default. ``select_key_components`` turns its result into a
:class:`KeyComponents`.
"""

from mathcircuits._checks import check_exports
from mathcircuits.patching.attribution import compare_rankings
from mathcircuits.patching.config import PatchingConfig, Rule, SelectionConfig, ThresholdOf
from mathcircuits.patching.driver import path_patch
from mathcircuits.patching.key_components import KeyComponents, SelectionError, SelectionSource
from mathcircuits.patching.metrics import Metric, MetricName, get_metric
from mathcircuits.patching.plan import ScanPlan, plan_scan
from mathcircuits.patching.result import PatchingResult, PatchSettings
from mathcircuits.patching.scan import Method, SenderKind
from mathcircuits.patching.selection import select_key_components, selection_stability

__all__ = [
    "ScanPlan",
    "plan_scan",
    "KeyComponents",
    "Method",
    "Metric",
    "MetricName",
    "PatchSettings",
    "PatchingConfig",
    "PatchingResult",
    "Rule",
    "SelectionConfig",
    "SelectionError",
    "SelectionSource",
    "SenderKind",
    "ThresholdOf",
    "compare_rankings",
    "get_metric",
    "path_patch",
    "select_key_components",
    "selection_stability",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
