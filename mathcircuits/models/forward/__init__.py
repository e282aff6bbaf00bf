"""The forward mechanics every method shares: they take a :class:`~mathcircuits.models.HookedModel` and run it.

Layers, top down: :mod:`.capture` (one forward, activations at the last position), :mod:`.changes` (a block's
attention and MLP contributions), :mod:`.readout` (final norm, unembedding, soft cap, in float32) and
:mod:`.suffix` (a prompt's tail rerun from a block on); :mod:`.prefix` (the shared few-shot prefix run once);
:mod:`.integrity` (each fast path checked against its plain path on the user's model) and :mod:`.placement`
(where each block of a split or offloaded model runs).
"""

from mathcircuits.models.forward.capture import capture
from mathcircuits.models.forward.changes import attn_change, attn_pre_norm_name, mlp_change
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
    layer_device,
    materialized,
    offloaded_parameters,
    output_device,
    unembed_columns,
    unloadable_parameters,
)
from mathcircuits.models.forward.prefix import (
    MIN_PREFIX,
    HFForward,
    PrefixCaches,
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
from mathcircuits.models.forward.suffix import SuffixRunner

__all__ = [
    "MIN_PREFIX",
    "RTOL",
    "HFForward",
    "HeadOutWeights",
    "IntegrityError",
    "PrefixCaches",
    "PrefixRunner",
    "Readout",
    "SuffixRunner",
    "Target",
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
    "is_split",
    "layer_device",
    "materialized",
    "mlp_change",
    "model_depth",
    "model_dtype",
    "offloaded_parameters",
    "output_device",
    "probe_pairs",
    "probe_tokens",
    "readout",
    "relative_tolerance",
    "repeat_cache",
    "run_from_layer",
    "shared_prefix_len",
    "soft_cap",
    "token_scores",
    "unembed_columns",
    "unit_roundoff",
    "unloadable_parameters",
    "verify_once",
    "vocab_chunk_for",
    "vocab_logits",
]
