"""Models: load any supported model as a TransformerLens hooked model, and the mechanics every method shares.

* :mod:`.loading` / :mod:`.wrap` — :func:`load_model` (a source name) and :func:`wrap` (an object you hold)
  give a :class:`HookedModel` (:mod:`.hooked`); :class:`ModelSpec` is its identity (:mod:`.spec`);
* :mod:`.families` — each family's block shape as data (:data:`FAMILIES`);
* :mod:`.hooks` — hook names; :mod:`.heads` — :class:`Head`, ``L{layer}.H{head}``;
* :mod:`.capture` — one forward, activations at the last position;
* :mod:`.readout` — the answer readout (final norm → unembedding → soft cap), in float32, vocabulary chunked;
* :mod:`.placement` — a model split or offloaded by accelerate: where each block runs, weights read through the
  offload hooks; :mod:`.memory` — the peak memory of a piece of work (CUDA allocated, or CPU RSS);
* :mod:`.changes` — how a block's contribution changes (attention output, MLP input);
* :mod:`.prefix` — prefix-cached forwards (the shared few-shot prefix runs once); :mod:`.suffix` — reruns of a
  prompt's tail from a block on, with the rest cached;
* :mod:`.compat` / :mod:`.integrity` — the dependency versions computed under, and every fast path checked
  against its plain path on the user's model at run time;
* :mod:`.tiny` / :mod:`.embedded` — tiny random models of every family; the embedded models (SmolLM2, Gemma 3 270M).
"""

from mathcircuits.models import hooks
from mathcircuits.models.compat import UnsupportedVersionError, check_versions
from mathcircuits.models.embedded import (
    EMBEDDED,
    EMBEDDED_NAME,
    EmbeddedSource,
    canonical_source,
    convert_gguf,
    embedded_model_dir,
    embedded_source,
    find_embedded_gguf,
    weights_note,
)
from mathcircuits.models.families import FAMILIES, BlockStructure, UnsupportedFamilyError, block_structure
from mathcircuits.models.forward import (
    RTOL,
    HeadOutWeights,
    HFForward,
    IntegrityError,
    PrefixRunner,
    Readout,
    SuffixRunner,
    attn_change,
    attn_pre_norm_name,
    capture,
    check_trainable_placement,
    checks_run,
    compare,
    devices_of,
    fast_paths,
    fast_paths_enabled,
    final_norm,
    head_out_weight,
    head_out_weights,
    is_split,
    layer_device,
    materialized,
    mlp_change,
    model_depth,
    offloaded_parameters,
    output_device,
    probe_pairs,
    probe_tokens,
    readout,
    relative_tolerance,
    repeat_cache,
    run_from_layer,
    shared_prefix_len,
    soft_cap,
    unembed_columns,
    unit_roundoff,
    unloadable_parameters,
    vocab_logits,
)
from mathcircuits.models.heads import Head, check_heads
from mathcircuits.models.hooked import HookedModel, execution_device
from mathcircuits.models.loading import load_hf_model, load_model, resolve_source
from mathcircuits.models.spec import Bridged, ModelMismatchError, ModelSpec, as_spec, check_model, heads_by_layer
from mathcircuits.models.tiny import TINY_CHARS, TINY_FAMILIES, tiny_gpt2, tiny_llama, tiny_model, tiny_tokenizer
from mathcircuits.models.wrap import from_bridge, from_hf, wrap

__all__ = [
    "HeadOutWeights",
    "check_trainable_placement",
    "devices_of",
    "execution_device",
    "head_out_weight",
    "head_out_weights",
    "is_split",
    "layer_device",
    "materialized",
    "offloaded_parameters",
    "output_device",
    "unembed_columns",
    "unloadable_parameters",
    "EMBEDDED",
    "EMBEDDED_NAME",
    "EmbeddedSource",
    "FAMILIES",
    "TINY_CHARS",
    "TINY_FAMILIES",
    "BlockStructure",
    "HFForward",
    "Head",
    "Bridged",
    "HookedModel",
    "IntegrityError",
    "RTOL",
    "ModelMismatchError",
    "ModelSpec",
    "PrefixRunner",
    "SuffixRunner",
    "Readout",
    "UnsupportedFamilyError",
    "UnsupportedVersionError",
    "as_spec",
    "attn_change",
    "attn_pre_norm_name",
    "block_structure",
    "capture",
    "check_heads",
    "check_model",
    "check_versions",
    "checks_run",
    "compare",
    "convert_gguf",
    "embedded_model_dir",
    "canonical_source",
    "embedded_source",
    "fast_paths",
    "fast_paths_enabled",
    "final_norm",
    "find_embedded_gguf",
    "from_bridge",
    "from_hf",
    "heads_by_layer",
    "hooks",
    "load_hf_model",
    "load_model",
    "model_depth",
    "probe_pairs",
    "probe_tokens",
    "relative_tolerance",
    "unit_roundoff",
    "mlp_change",
    "readout",
    "repeat_cache",
    "resolve_source",
    "run_from_layer",
    "shared_prefix_len",
    "soft_cap",
    "tiny_gpt2",
    "tiny_llama",
    "tiny_model",
    "tiny_tokenizer",
    "vocab_logits",
    "wrap",
    "weights_note",
]
