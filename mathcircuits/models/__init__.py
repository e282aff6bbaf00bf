"""Models: load any supported model as a TransformerLens hooked model, and the mechanics every method shares.

* :mod:`.loading` / :mod:`.wrap` — :func:`load_model` (a source name) and :func:`wrap` (an object you hold) give a
  :class:`HookedModel` (:mod:`.hooked`), whose identity is a :class:`ModelSpec` (:mod:`.spec`); the two import
  nothing else from models/;
* :mod:`.families` (each family's block shape as data), :mod:`.hooks` (hook names), :mod:`.heads`
  (:class:`Head`, ``L{layer}.H{head}``), :mod:`.compat` (the dependency versions computed under);
* :mod:`.forward` — the forward mechanics: capture, readout, block changes, prefix-cached and resumed forwards,
  their run-time integrity checks, and placement on split or offloaded models;
* :mod:`.tiny` / :mod:`.embedded` — tiny random models of every family; the embedded models (SmolLM2, Gemma 3 270M).
"""

from mathcircuits.models.compat import UnsupportedVersionError
from mathcircuits.models.families import BlockStructure, UnsupportedFamilyError
from mathcircuits.models.forward import (
    HFForward,
    IntegrityError,
    PrefixRunner,
    Readout,
    check_trainable_placement,
    fast_paths,
    run_from_layer,
)
from mathcircuits.models.heads import Head
from mathcircuits.models.hooked import HookedModel
from mathcircuits.models.loading import load_hf_model, load_model, resolve_source
from mathcircuits.models.spec import ModelMismatchError, ModelSpec
from mathcircuits.models.wrap import from_bridge, from_hf, wrap

__all__ = [
    "fast_paths",
    "check_trainable_placement",
    "BlockStructure",
    "HFForward",
    "Head",
    "HookedModel",
    "IntegrityError",
    "ModelMismatchError",
    "ModelSpec",
    "PrefixRunner",
    "Readout",
    "UnsupportedFamilyError",
    "UnsupportedVersionError",
    "from_bridge",
    "from_hf",
    "load_hf_model",
    "load_model",
    "resolve_source",
    "run_from_layer",
    "wrap",
]
