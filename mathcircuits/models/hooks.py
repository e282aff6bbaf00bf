"""Hook names of the TransformerBridge in compatibility mode, in one place.

After ``enable_compatibility_mode(no_processing=True)`` the bridge exposes HookedTransformer-style names. Every
module that hooks a model builds its names here, so a renamed hook changes one file. ``layer`` is the 0-based
block index. On families with output norms (Gemma 2/3, OLMo 2) ``attn_out`` / ``mlp_out`` are after the
post-attention / post-feed-forward norm; :mod:`mathcircuits.models.families` says which submodules a family has.
"""

from __future__ import annotations

__all__: list[str] = []


def sub(layer: int, name: str) -> str:
    """The hook ``name`` of block ``layer`` (e.g. ``sub(3, "ln2.hook_out")`` → ``blocks.3.ln2.hook_out``)."""
    return f"blocks.{layer}.{name}"


def z(layer: int) -> str:
    """Per-query-head attention output before the output projection, ``[batch, seq, head, d_head]``."""
    return sub(layer, "attn.hook_z")


def pattern(layer: int) -> str:
    """Attention probabilities ``[batch, head, query, key]``."""
    return sub(layer, "attn.hook_pattern")


def attn_out(layer: int) -> str:
    """What attention adds to the residual stream (after its output norm, if any), ``[batch, seq, d_model]``."""
    return sub(layer, "hook_attn_out")


def mlp_out(layer: int) -> str:
    """What the MLP block adds to the residual stream (after its output norm, if any), ``[batch, seq, d_model]``."""
    return sub(layer, "hook_mlp_out")


def mlp_in(layer: int) -> str:
    """What the MLP itself reads (after its input norm, if any), ``[batch, seq, d_model]``."""
    return sub(layer, "mlp.hook_in")


def resid_pre(layer: int) -> str:
    """Residual stream entering block ``layer``, ``[batch, seq, d_model]``."""
    return sub(layer, "hook_resid_pre")


def resid_mid(layer: int) -> str:
    """Residual stream between attention and MLP (sequential blocks only; parallel blocks have none)."""
    return sub(layer, "hook_resid_mid")


def resid_post(layer: int) -> str:
    """Residual stream leaving block ``layer``, ``[batch, seq, d_model]``."""
    return sub(layer, "hook_resid_post")
