"""Capture activations at one position: one hooked forward, the logits and each named hook's value.

Every method that reads a model at the answer position (path patching's two cached runs, circuit edges, node
roles) runs the prompts once and keeps a few hooks' values and the logits at the last position. With the last
position only, the shared few-shot prefix can run once (:class:`~mathcircuits.models.forward.prefix.PrefixRunner`,
exact), and the unembedding is needed at one position (``logits_to_keep=1``).
"""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformer_lens.model_bridge import TransformerBridge

from mathcircuits._errors import FixableValueError
from mathcircuits.models.forward.prefix import PrefixCaches, PrefixRunner

__all__: list[str] = []


@torch.no_grad()
def capture(
    bridge: TransformerBridge,
    tokens: Int[Tensor, "batch seq"],
    names: list[str],
    position: int | None = -1,
    cache_store: PrefixCaches | None = None,
    last: int | None = None,
) -> tuple[Float[Tensor, "batch *pos vocab"], dict[str, Tensor]]:
    """One forward; the logits and each named activation at ``position`` (every position when ``None``).

    With ``position == -1`` and a ``cache_store`` (clean prefix KV caches), the batch's shared prefix runs once and
    is reused by later calls. ``last`` reads the last ``last`` positions instead (teacher forcing: the last prompt
    position and each answer position), keeping a position axis of that length.

    Example::

        logits, acts = capture(model.bridge, tokens, [hooks.z(3), hooks.mlp_out(3)])
        acts[hooks.z(3)]          # [batch, n_heads, d_head], the last position's value
    """
    store: dict[str, Tensor] = {}
    if last is not None:
        if not 1 <= last <= tokens.shape[1]:
            raise FixableValueError(f"last={last} positions of {tokens.shape[1]} tokens. ", "use 1 <= last <= seq.")
        position = -1
    where = slice(None) if position is None else (slice(-last, None) if last is not None else position)

    def make(name: str) -> Any:
        # keyed by the requested name: the bridge may report an aliased hook.name
        def hook(act: Tensor, hook: Any) -> None:
            store[name] = act[:, where].detach().clone()

        return hook

    fwd = [(n, make(n)) for n in names]
    if position == -1 and cache_store is not None:
        logits = PrefixRunner(bridge, fwd, store=cache_store).logits_from(tokens, tokens.shape[1] - (last or 1))
        return (logits[:, -last:] if last is not None else logits[:, -1]), store
    # only the last position's logits are needed: skip the unembedding elsewhere
    extra = {"logits_to_keep": last or 1} if position == -1 else {}
    logits = bridge.run_with_hooks(tokens, fwd_hooks=fwd, **extra)
    if last is not None:
        return logits[:, -last:], store
    return (logits if position is None else logits[:, position]), store
