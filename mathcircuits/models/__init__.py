"""Models: load any supported model as a TransformerLens hooked model, and the mechanics every method shares.

* :mod:`.loading` / :mod:`.wrap` — :func:`load_model` (a source name) and :func:`wrap` (an object you hold) give a
  :class:`HookedModel` (:mod:`.hooked`), whose identity is a :class:`ModelSpec` (:mod:`.spec`); the two import
  nothing else from models/;
* :mod:`.families` (each family's block shape as data), :mod:`.hooks` (hook names), :mod:`.heads`
  (:class:`Head`, ``L{layer}.H{head}``), :mod:`.compat` (the dependency versions computed under);
* :mod:`.forward` — the forward mechanics: capture, readout, block changes, prefix-cached and resumed forwards,
  their run-time integrity checks, and placement on split or offloaded models. Code outside models/ calls them
  through the :class:`HookedModel` (:meth:`~HookedModel.prefix_cached`, :meth:`~HookedModel.layer_device`,
  :meth:`~HookedModel.output_device`, :attr:`~HookedModel.dtype`) and the names below, never :mod:`.forward`'s
  modules (an import-linter contract);
* :mod:`.tiny` / :mod:`.embedded` — tiny random models of every family; the embedded models (SmolLM2, Gemma 3 270M).
"""

from mathcircuits._checks import check_exports
from mathcircuits.models.compat import UnsupportedVersionError
from mathcircuits.models.families import BlockStructure, UnsupportedFamilyError
from mathcircuits.models.forward.capture import (
    capture,
)
from mathcircuits.models.forward.changes import (
    attn_change,
    attn_pre_norm_name,
    mlp_change,
)
from mathcircuits.models.forward.integrity import (
    RTOL,
    IntegrityError,
    checks_run,
    compare,
    fast_paths,
    fast_paths_enabled,
    model_depth,
    model_dtype,
    probe_pairs,
    probe_tokens,
    relative_tolerance,
    unit_roundoff,
    verify_once,
)
from mathcircuits.models.forward.placement import (
    HeadOutWeights,
    check_trainable_placement,
    devices_of,
    head_out_weight,
    head_out_weights,
    is_split,
    materialized,
    offloaded_parameters,
    unembed_columns,
    unloadable_parameters,
)
from mathcircuits.models.forward.prefix import (
    MIN_PREFIX,
    HFForward,
    PrefixRunner,
    repeat_cache,
    run_from_layer,
    shared_prefix_len,
)
from mathcircuits.models.forward.readout import (
    Readout,
    Target,
    final_norm,
    readout,
    soft_cap,
    token_scores,
    vocab_chunk_for,
    vocab_logits,
)
from mathcircuits.models.forward.suffix import (
    SuffixRunner,
)
from mathcircuits.models.heads import Head
from mathcircuits.models.hooked import HookedModel, PrefixCaches
from mathcircuits.models.loading import load_hf_model, load_model, resolve_source
from mathcircuits.models.spec import ModelMismatchError, ModelSpec
from mathcircuits.models.wrap import from_bridge, from_hf, wrap

__all__ = [
    # loading and wrapping a model: what a user calls
    "BlockStructure",
    "Head",
    "HookedModel",
    "ModelMismatchError",
    "ModelSpec",
    "UnsupportedFamilyError",
    "UnsupportedVersionError",
    "from_bridge",
    "from_hf",
    "load_hf_model",
    "load_model",
    "resolve_source",
    "wrap",
    # the engine's public face: the forward mechanics other packages call (never mathcircuits.models.forward)
    "attn_change",
    "attn_pre_norm_name",
    "capture",
    "check_trainable_placement",
    "checks_run",
    "compare",
    "devices_of",
    "fast_paths",
    "fast_paths_enabled",
    "final_norm",
    "head_out_weight",
    "head_out_weights",
    "HeadOutWeights",
    "HFForward",
    "IntegrityError",
    "is_split",
    "materialized",
    "MIN_PREFIX",
    "mlp_change",
    "model_depth",
    "model_dtype",
    "offloaded_parameters",
    "PrefixCaches",
    "PrefixRunner",
    "probe_pairs",
    "probe_tokens",
    "Readout",
    "readout",
    "relative_tolerance",
    "repeat_cache",
    "RTOL",
    "run_from_layer",
    "shared_prefix_len",
    "soft_cap",
    "SuffixRunner",
    "Target",
    "token_scores",
    "unembed_columns",
    "unit_roundoff",
    "unloadable_parameters",
    "verify_once",
    "vocab_chunk_for",
    "vocab_logits",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
