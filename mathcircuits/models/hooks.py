"""Hook names of the TransformerBridge in compatibility mode, in one place.

The bridge, after ``enable_compatibility_mode(no_processing=True)``, exposes
HookedTransformer-style names. Every module that hooks a model builds names
here instead of writing f-strings, so a renamed hook changes one file.

Meaning (batch B, sequence S, per layer ``l``):

* ``z(l)``: ``[B, S, n_heads, d_head]``, each query head's output before ``W_O``;
* ``pattern(l)``: ``[B, n_heads, S, S]``, attention probabilities;
* ``attn_out(l)`` / ``mlp_out(l)``: ``[B, S, d_model]``, what attention / the MLP
  *add to the residual stream*. On families with output norms (Gemma 2/3,
  OLMo 2) this is after the post-attention / post-feed-forward norm;
* ``resid_pre(l)``, ``resid_mid(l)`` (sequential blocks only), ``resid_post(l)``;
* ``sub(l, "ln1_post.hook_in")``: any hook of a block submodule (see
  :mod:`mathcircuits.models.families` for which submodules a family has).
"""

from __future__ import annotations

__all__ = ["attn_out", "mlp_in", "mlp_out", "pattern", "resid_mid", "resid_post", "resid_pre", "sub", "z"]


def sub(layer: int, name: str) -> str:
    """The hook ``name`` of block ``layer`` (e.g. ``sub(3, "ln2.hook_out")`` → ``blocks.3.ln2.hook_out``).

    Args:
        layer: Block index, 0-based.
        name: Hook name relative to the block, e.g. ``"attn.hook_z"``.

    Returns:
        The full hook name ``blocks.{layer}.{name}``.
    """
    return f"blocks.{layer}.{name}"


def z(layer: int) -> str:
    """Per-query-head attention output before the output projection.

    Args:
        layer: Block index, 0-based.

    Returns:
        The TransformerLens hook name in block ``layer`` (hooked tensor is [batch, seq, head, d_head]).
    """
    return sub(layer, "attn.hook_z")


def pattern(layer: int) -> str:
    """Attention probabilities [batch, head, query, key].

    Args:
        layer: Block index, 0-based.

    Returns:
        The TransformerLens hook name in block ``layer`` (hooked tensor is [batch, head, query, key]).
    """
    return sub(layer, "attn.hook_pattern")


def attn_out(layer: int) -> str:
    """What the attention block adds to the residual stream (after its output norm, if any).

    Args:
        layer: Block index, 0-based.

    Returns:
        The TransformerLens hook name in block ``layer`` (hooked tensor is [batch, seq, d_model]).
    """
    return sub(layer, "hook_attn_out")


def mlp_out(layer: int) -> str:
    """What the MLP block adds to the residual stream (after its output norm, if any).

    Args:
        layer: Block index, 0-based.

    Returns:
        The TransformerLens hook name in block ``layer`` (hooked tensor is [batch, seq, d_model]).
    """
    return sub(layer, "hook_mlp_out")


def mlp_in(layer: int) -> str:
    """What the MLP itself reads (after its input norm, if any).

    Args:
        layer: Block index, 0-based.

    Returns:
        The TransformerLens hook name in block ``layer`` (hooked tensor is [batch, seq, d_model]).
    """
    return sub(layer, "mlp.hook_in")


def resid_pre(layer: int) -> str:
    """Residual stream entering block ``layer``.

    Args:
        layer: Block index, 0-based.

    Returns:
        The TransformerLens hook name in block ``layer`` (hooked tensor is [batch, seq, d_model]).
    """
    return sub(layer, "hook_resid_pre")


def resid_mid(layer: int) -> str:
    """Residual stream between attention and MLP (sequential blocks only; parallel blocks have none).

    Args:
        layer: Block index, 0-based.

    Returns:
        The TransformerLens hook name in block ``layer`` (hooked tensor is [batch, seq, d_model]).
    """
    return sub(layer, "hook_resid_mid")


def resid_post(layer: int) -> str:
    """Residual stream leaving block ``layer``.

    Args:
        layer: Block index, 0-based.

    Returns:
        The TransformerLens hook name in block ``layer`` (hooked tensor is [batch, seq, d_model]).
    """
    return sub(layer, "hook_resid_post")
