"""Prefix-cached forwards: run the shared few-shot prefix once, then only what differs.

A causal model's activations at a position depend only on the tokens up to it, so for rows sharing their first
``P`` tokens (a template's few-shot prefix) the prefix's keys and values are the same in every row: the prefix
runs once, its KV cache is repeated over the batch, and only the suffix runs:

    forward(x)[:, P:]  =  forward(x[:, P:] | KV(x[0, :P]))

Exact in exact arithmetic; in float32 the two differ by summation order only (≤ 1e-5, tests/test_fast_paths.py).
Hooks of the suffix run see only positions ``P…S−1``; hooks that must act on the prefix too go to the prefix run.

:func:`run_from_layer` resumes mid-network: when an intervention touches only blocks ``k…``, the clean residual
entering block ``k`` goes to blocks ``k…L−1`` only. TransformerLens 4's ``start_at_layer`` alone still executes
blocks ``0…k−1``, so the HF model also gets, for the call, a ``ModuleList`` of blocks ``k…`` (the same module
objects: hooks, weights and each attention's ``layer_idx`` into the KV cache unchanged), found by identity, so
no family's attribute path is spelled here.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from mathcircuits._errors import FixableRuntimeError, FixableValueError
from mathcircuits.models.forward.integrity import compare, fast_paths_enabled, model_depth, probe_tokens, verify_once
from mathcircuits.models.forward.placement import execution_device
from mathcircuits.models.hooked import PrefixCaches
from mathcircuits.models.hooks import resid_pre

__all__ = [
    "HFForward",
    "PrefixRunner",
    "run_from_layer",
]

MIN_PREFIX = 4
"""Shorter shared prefixes are not worth a second forward: the plain forward runs instead."""


def shared_prefix_len(tokens: Int[Tensor, "batch seq"], limit: int | None = None) -> int:
    """Length ``P`` of the token prefix every row shares, at most ``limit`` (default ``seq − 1``)."""
    seq = tokens.shape[1]
    limit = seq - 1 if limit is None else min(limit, seq - 1)
    same = (tokens == tokens[:1]).all(0)
    differ = (~same[:limit]).nonzero()
    return int(differ[0]) if len(differ) else max(limit, 0)


class HFForward:
    """A plain HF causal LM with the calling convention :class:`PrefixRunner` uses for a bridge (no hooks).

    So a fine-tuned model, which has no TransformerBridge, gets the same prefix-cached scoring.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def __call__(
        self,
        tokens: Int[Tensor, "batch seq"],
        past_key_values: Any = None,
        return_type: str = "logits",
        logits_to_keep: int = 0,
    ) -> Any:
        """Logits (or ``(logits, KV cache)`` for ``return_type="logits_and_cache"``) of ``tokens``."""
        cached = return_type == "logits_and_cache"
        out = self.model(
            input_ids=tokens,
            past_key_values=past_key_values,
            use_cache=cached or past_key_values is not None,
            logits_to_keep=logits_to_keep,
        )
        return (out.logits, out.past_key_values) if cached else out.logits

    def run_with_hooks(self, tokens: Int[Tensor, "batch seq"], fwd_hooks: Sequence[Any] = (), **kwargs: Any) -> Any:
        if fwd_hooks:
            raise FixableValueError("HFForward runs a plain HF model: it has no hook points. ", "use the hooked model.")
        return self(tokens, **kwargs)


class PrefixRunner:
    """A tokens → logits callable that runs the batch's shared prefix once.

    Args:
        fwd_hooks: hooks of the suffix run (positions ``P…S−1``) and of the plain forward.
        prefix_hooks: hooks of the prefix run (``None``: clean). The caller guarantees that ``fwd_hooks`` on the
            whole prompt act like ``prefix_hooks`` on the prefix and ``fwd_hooks`` on the suffix (true for an
            ablation at every position with ``prefix_hooks=fwd_hooks``, and at the last position with ``None``).
    min_prefix: below this shared length the plain forward runs.
        store: prefix KV caches shared with runners that have the same ``prefix_hooks`` (path patching's two runs).
    """

    def __init__(
        self,
        bridge: TransformerBridge | HFForward,
        fwd_hooks: Sequence[tuple[str, Any]] = (),
        prefix_hooks: Sequence[tuple[str, Any]] | None = None,
        min_prefix: int = MIN_PREFIX,
        store: PrefixCaches | None = None,
    ) -> None:
        self.bridge = bridge
        self.fwd_hooks = list(fwd_hooks)
        self.prefix_hooks = list(prefix_hooks or [])
        self.min_prefix = min_prefix
        self._caches: PrefixCaches = {} if store is None else store

    def _run(self, tokens: Tensor, hooks: list[tuple[str, Any]], **kwargs: Any) -> Any:
        if hooks:
            return self.bridge.run_with_hooks(tokens, fwd_hooks=hooks, **kwargs)
        return self.bridge(tokens, **kwargs)

    def prefix_cache(self, prefix: Int[Tensor, " pos"]) -> Any:
        """The KV cache of one prefix (computed once per runner, with ``prefix_hooks``)."""
        key = tuple(prefix.tolist())
        if key not in self._caches:
            _, cache = self._run(prefix[None], self.prefix_hooks, return_type="logits_and_cache")
            self._caches[key] = cache
        return self._caches[key]

    @torch.no_grad()
    def logits_from(self, tokens: Int[Tensor, "batch seq"], start: int) -> Float[Tensor, "batch pos vocab"]:
        """Logits ``[batch, S − start, vocab]`` at positions ``start…S−1`` (hooks applied).

        Equal to the plain forward's ``[:, start:]``.
        """
        seq = tokens.shape[1]
        if not 0 <= start < seq:
            raise FixableValueError(
                f"start {start} is outside the prompt of {seq} tokens. ", f"use 0 <= start < {seq}."
            )
        if not fast_paths_enabled():
            return self._run(tokens, self.fwd_hooks)[:, start:]
        p = shared_prefix_len(tokens, start)
        if p < self.min_prefix:
            return self._run(tokens, self.fwd_hooks, logits_to_keep=seq - start)
        verify_once(_module(self.bridge), "prefix cache", lambda: check_prefix_cache(self.bridge))
        return self._suffix_logits(tokens, p, keep=seq - start)

    def _suffix_logits(
        self, tokens: Int[Tensor, "batch seq"], p: int, keep: int = 0
    ) -> Float[Tensor, "batch suffix vocab"]:
        """Logits of positions ``p…`` (the last ``keep`` only) from the suffix run on the repeated prefix KV cache.

        With Gemma 3's 262k-token vocabulary the unembedding of every suffix position would cost more than the blocks.
        """
        cache = copy.deepcopy(self.prefix_cache(tokens[0, :p]))
        cache.batch_repeat_interleave(tokens.shape[0])
        return self._run(tokens[:, p:], self.fwd_hooks, past_key_values=cache, logits_to_keep=keep)

    def __call__(self, tokens: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq vocab"]:
        """Logits at every position: the plain forward with ``fwd_hooks`` (the contract of a model callable)."""
        return self._run(tokens, self.fwd_hooks)


def repeat_cache(cache: Any, batch: int) -> Any:
    """A copy of a one-row KV cache repeated over ``batch`` rows (the stored cache is left as it is)."""
    out = copy.deepcopy(cache)
    out.batch_repeat_interleave(batch)
    return out


def _block_list(bridge: TransformerBridge) -> tuple[torch.nn.Module, str, torch.nn.ModuleList]:
    """The HF module holding the decoder blocks, the attribute name and the list (found by identity)."""
    first = bridge.blocks[0]
    for module in bridge.original_model.modules():
        for name, child in module.named_children():
            if isinstance(child, torch.nn.ModuleList) and len(child) == len(bridge.blocks) and child[0] is first:
                return module, name, child
    raise FixableRuntimeError(
        f"no ModuleList of the {type(bridge.original_model).__name__} holds the bridge's {len(bridge.blocks)} blocks, "
        "so a forward cannot resume mid-network. ",
        "run the whole forward (start layer 0).",
    )


@contextmanager
def blocks_from(bridge: TransformerBridge, layer: int) -> Iterator[None]:
    """Within the block, the HF model runs only blocks ``layer…`` (restored afterwards, also on errors)."""
    owner, name, full = _block_list(bridge)
    if not 0 <= layer < len(full):
        raise FixableValueError(
            f"layer {layer} is outside the model's {len(full)} blocks. ", f"use 0 <= layer < {len(full)}."
        )
    # Families with per-layer attention types (Gemma 2/3: sliding vs full attention, each with its own rotary
    # base; Qwen 2/3 and OLMo 3 with sliding layers) look a block's type up as `config.layer_types[i]`, i its
    # index in the list: the shortened list must come with the types of the blocks it holds.
    config = getattr(owner, "config", None)
    types = getattr(config, "layer_types", None)
    sliced = isinstance(types, (list, tuple)) and len(types) == len(full)
    setattr(owner, name, torch.nn.ModuleList(list(full)[layer:]))
    if sliced:
        config.layer_types = list(types)[layer:]
    try:
        yield
    finally:
        setattr(owner, name, full)
        if sliced:
            config.layer_types = types


@torch.no_grad()
def run_from_layer(
    bridge: TransformerBridge,
    resid: Float[Tensor, "batch pos d_model"],
    layer: int,
    past_key_values: Any = None,
    fwd_hooks: Sequence[tuple[str, Any]] = (),
    **kwargs: Any,
) -> Float[Tensor, "batch kept vocab"]:
    """Logits of a forward that starts at block ``layer`` from the residual ``resid`` entering it.

    ``past_key_values`` is the KV cache of the positions before ``resid`` (every layer); a hook below ``layer`` is
    refused (it would never fire). With the clean residual and hooks in blocks ``layer…`` only, equal to the full
    forward's logits (≤ 1e-5, tests/test_fast_paths.py).
    """
    below = [str(n) for n, _ in fwd_hooks if str(n).startswith("blocks.") and int(str(n).split(".")[1]) < layer]
    if below:
        raise FixableValueError(
            f"hooks {below[:3]} sit in blocks below the start layer {layer}, which do not run, so they would never "
            f"fire. ",
            f"start at layer {min(int(n.split('.')[1]) for n in below)} or drop those hooks.",
        )
    if layer > 0:
        verify_once(bridge, "resume at a layer", lambda: check_resume(bridge))
    extra = dict(kwargs)
    if past_key_values is not None:
        extra["past_key_values"] = past_key_values
    else:  # a cache the model made itself would follow the shortened block list (see blocks_from): none is needed
        extra.setdefault("use_cache", False)
    resid = resid.to(execution_device(bridge.blocks[layer]))  # a no-op for a residual captured at that block
    with blocks_from(bridge, layer):
        return bridge.run_with_hooks(resid, fwd_hooks=list(fwd_hooks), start_at_layer=layer, **extra)


def _module(bridge: Any) -> torch.nn.Module:
    return bridge.model if isinstance(bridge, HFForward) else bridge


def _vocab(bridge: Any) -> int:
    cfg = getattr(bridge, "cfg", None)
    return int(getattr(cfg, "d_vocab", 0) or _module(bridge).config.vocab_size)


def _device(bridge: Any) -> torch.device:
    return execution_device(_module(bridge))  # the embedding's (not ``meta`` for offloaded weights)


def check_prefix_cache(bridge: Any) -> tuple[float, float]:
    """Prefix-cached logits against the plain forward's on a probe batch: ``(difference, tolerance)``."""
    toks = probe_tokens(_vocab(bridge), _device(bridge))
    plain = bridge(toks)[:, -3:]
    fast = PrefixRunner(bridge).logits_from(toks, toks.shape[1] - 3)
    return compare(fast, plain, depth=model_depth(bridge))


def check_resume(bridge: Any) -> tuple[float, float]:
    """A forward resumed at the middle block (with a prefix KV cache) against the plain forward."""
    toks = probe_tokens(_vocab(bridge), _device(bridge))
    layer = max(1, int(bridge.cfg.n_layers) // 2)
    p = shared_prefix_len(toks)
    grabbed: dict[str, Tensor] = {}

    def grab(act: Tensor, hook: Any) -> None:
        grabbed["resid"] = act.detach()

    _, one = bridge(toks[:1, :p], return_type="logits_and_cache")
    plain = bridge.run_with_hooks(
        toks[:, p:], fwd_hooks=[(resid_pre(layer), grab)], past_key_values=repeat_cache(one, toks.shape[0])
    )
    fast = run_from_layer(bridge, grabbed["resid"], layer, repeat_cache(one, toks.shape[0]))
    full = bridge(toks)[:, p:]
    d1, t1 = compare(fast, plain, depth=model_depth(bridge))
    d2, t2 = compare(plain, full, depth=model_depth(bridge))
    return max(d1, d2), min(t1, t2)
