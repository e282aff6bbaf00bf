"""Stage 3 — patching: path patching from heads/MLPs to the logits, and key components.

``path_patch(model, dataset)`` is the entry point (exact last-position method by
default; ``method="reference"`` and ``method="attribution"`` for checking and
screening), in :mod:`.driver`. The methods share one core (:mod:`._common`):
a last-position cache with its readout, and :class:`Metric` values
(:mod:`.metrics`). ``select_key_components`` turns a result into a :class:`KeyComponents`.
"""

from mathcircuits.patching._common import LastPositionCache, last_position_caches
from mathcircuits.patching.attribution import compare_rankings
from mathcircuits.patching.driver import METHODS, path_patch
from mathcircuits.patching.metrics import METRICS, Metric, Readout, get_metric
from mathcircuits.patching.result import PatchingResult
from mathcircuits.patching.selection import RULES, KeyComponents, SelectionError, select_key_components

__all__ = [
    "METHODS",
    "METRICS",
    "RULES",
    "KeyComponents",
    "LastPositionCache",
    "Metric",
    "PatchingResult",
    "Readout",
    "SelectionError",
    "compare_rankings",
    "get_metric",
    "last_position_caches",
    "path_patch",
    "select_key_components",
]
