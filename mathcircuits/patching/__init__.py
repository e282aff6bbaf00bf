"""Stage 3 — patching: path patching from heads/MLPs to the logits, and key components.

``path_patch(model, dataset)`` is the entry point (exact last-position method by
default; ``method="reference"`` and ``method="attribution"`` for checking and
screening). ``select_key_components`` turns a result into a :class:`KeyComponents`.
"""

from mathcircuits.patching.attribution import compare_rankings
from mathcircuits.patching.exact import last_position_caches, path_patch
from mathcircuits.patching.result import METRICS, PatchingResult
from mathcircuits.patching.selection import RULES, KeyComponents, SelectionError, select_key_components

__all__ = [
    "METRICS",
    "RULES",
    "KeyComponents",
    "PatchingResult",
    "SelectionError",
    "compare_rankings",
    "last_position_caches",
    "path_patch",
    "select_key_components",
]
