"""Stage ``identify`` — path patching from heads/MLPs to the logits, and key components.

``path_patch(model, dataset)`` (:mod:`.driver`) is the entry point: the exact method, scoring the whole
answer's teacher-forced log-probability, by default. ``select_key_components`` turns its result into a
:class:`KeyComponents`.
"""

from mathcircuits._checks import check_exports
from mathcircuits.patching.attribution import compare_rankings
from mathcircuits.patching.cache import LastPositionCache, last_position_caches
from mathcircuits.patching.config import PatchingConfig, Rule, SelectionConfig, ThresholdOf
from mathcircuits.patching.driver import METHODS, path_patch
from mathcircuits.patching.key_components import (
    RULES,
    KeyComponents,
    SelectionError,
    SelectionSource,
    median_depth,
    resolve_heads,
)
from mathcircuits.patching.metrics import (
    LAST_POSITION_METRICS,
    METRICS,
    RELATIVE_MIN_CLEAN,
    LastPositionMetric,
    Metric,
    MetricFn,
    MetricName,
    answer_readout,
    get_metric,
)
from mathcircuits.patching.plan import ScanPlan, parse_bytes, plan_scan, scan_bytes
from mathcircuits.patching.result import PatchingResult, PatchSettings
from mathcircuits.patching.scan import SENDER_KINDS, Method, SenderKind, Senders
from mathcircuits.patching.selection import select_key_components, selection_stability

__all__ = [
    "ScanPlan",
    "Senders",
    "parse_bytes",
    "plan_scan",
    "scan_bytes",
    "KeyComponents",
    "LAST_POSITION_METRICS",
    "LastPositionCache",
    "LastPositionMetric",
    "METHODS",
    "METRICS",
    "Method",
    "Metric",
    "MetricFn",
    "MetricName",
    "PatchSettings",
    "PatchingConfig",
    "PatchingResult",
    "RELATIVE_MIN_CLEAN",
    "Rule",
    "RULES",
    "SENDER_KINDS",
    "SelectionConfig",
    "SelectionError",
    "SelectionSource",
    "SenderKind",
    "ThresholdOf",
    "answer_readout",
    "compare_rankings",
    "get_metric",
    "last_position_caches",
    "median_depth",
    "path_patch",
    "resolve_heads",
    "select_key_components",
    "selection_stability",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
