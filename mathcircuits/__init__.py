"""mathcircuits: find, explain and fine-tune the circuits LLMs use for arithmetic.

The front door: the verbs a notebook needs, loaded on first use (``import mathcircuits`` itself
imports no model library)::

    import mathcircuits as mc
    model = mc.load_model("embedded")
    pairs = mc.correct_pairs(model, "add", n=16)
    result = mc.path_patch(model, pairs)
    key = mc.select_key_components(result, rule="topk", k=5)

* :func:`load_model` — a hooked model (``"embedded"``, ``"tiny-llama"``, an HF folder, a .gguf file);
* :func:`correct_pairs` — token-aligned prompt pairs the model answers correctly;
* :func:`fresh_pairs` — more correct pairs, disjoint from given ones (to score on pairs that chose nothing);
* :func:`path_patch` — every head's and MLP's effect on the answer (a ``PatchingResult``);
* :func:`select_key_components` — the key heads and MLPs (a ``KeyComponents``);
* :func:`knockout_curve` — accuracy as the top heads are knocked out, beside random heads;
* :func:`attention_by_role` — where the key heads attend (operands, operator, ...);
* :func:`discover_circuit` — the circuit behind the key heads;
* :func:`run_pipeline` — every stage into a run folder (what ``mathcircuits run`` does).

Every result prints briefly and renders in a notebook; the figures of :mod:`mathcircuits.viz` take
them (``mc.viz.patching_heatmap(result, key)``). The subpackages, in the order imports flow:
data → models → patching → ablation / analysis / numbers → circuit → viz, finetune, evaluation → claims →
report → pipeline → cli (``docs/architecture.md``).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from mathcircuits._noise import filter_dependency_warnings

if TYPE_CHECKING:
    from mathcircuits import viz
    from mathcircuits._codec import Encoded, EncodedValue
    from mathcircuits._errors import FixableError
    from mathcircuits._files import JSONObject, JSONValue
    from mathcircuits._io import ResultFileError
    from mathcircuits.ablation import knockout_curve
    from mathcircuits.analysis import attention_by_role
    from mathcircuits.circuit import discover_circuit
    from mathcircuits.data import correct_pairs, fresh_pairs
    from mathcircuits.models import load_model
    from mathcircuits.patching import path_patch, select_key_components
    from mathcircuits.pipeline import run_pipeline

from mathcircuits._version import __version__

filter_dependency_warnings()  # the known noise of transformers and tqdm only (mathcircuits._noise)

#: verb → the subpackage that defines it (imported on first use).
_VERBS = {
    "load_model": "mathcircuits.models",
    "correct_pairs": "mathcircuits.data",
    "fresh_pairs": "mathcircuits.data",
    "path_patch": "mathcircuits.patching",
    "select_key_components": "mathcircuits.patching",
    "knockout_curve": "mathcircuits.ablation",
    "attention_by_role": "mathcircuits.analysis",
    "discover_circuit": "mathcircuits.circuit",
    "run_pipeline": "mathcircuits.pipeline",
    "ResultFileError": "mathcircuits._io",  # what every load raises for a file it cannot read
    "FixableError": "mathcircuits._errors",  # what every refused input raises: its .problem and .fix
    "JSONObject": "mathcircuits._files",  # the types of what crosses a file border: a JSON object,
    "JSONValue": "mathcircuits._files",
    "Encoded": "mathcircuits._codec",  # a saved value's dict (to_dict / from_dict)
    "EncodedValue": "mathcircuits._codec",
}

__all__ = [
    "Encoded",
    "EncodedValue",
    "FixableError",
    "JSONObject",
    "JSONValue",
    "ResultFileError",
    "__version__",
    "attention_by_role",
    "correct_pairs",
    "discover_circuit",
    "fresh_pairs",
    "knockout_curve",
    "load_model",
    "path_patch",
    "run_pipeline",
    "select_key_components",
    "viz",
]


def _import_verb_module(module: str) -> Any:
    """Import a verb's module; the first one pulls in torch, transformers and TransformerLens (5-15 s on a CPU),
    so an import still running after half a second shows a bar (off with ``MATHCIRCUITS_PROGRESS=0``)."""
    if "transformer_lens" in sys.modules:
        return importlib.import_module(module)
    import threading

    from mathcircuits._progress import progress_bar

    bars: list[Any] = []
    timer = threading.Timer(
        0.5, lambda: bars.append(progress_bar(None, "importing torch, transformers and TransformerLens", total=1))
    )
    timer.start()
    try:
        return importlib.import_module(module)
    finally:
        timer.cancel()
        timer.join()
        for bar in bars:
            bar.update(1)
            bar.close()


def __getattr__(name: str) -> Any:
    if name in _VERBS:
        value = getattr(_import_verb_module(_VERBS[name]), name)
    elif name == "viz":
        value = importlib.import_module("mathcircuits.viz")
    else:
        raise AttributeError(f"module 'mathcircuits' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)  # the verbs, not the module's own helpers (importlib, Any, ...)
