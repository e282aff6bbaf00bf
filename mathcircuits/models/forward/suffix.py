"""Run the tail of equal-length prompts again and again, with everything before it cached.

An intervention at position ``s`` changes nothing before ``s`` in a causal model. :class:`SuffixRunner` runs
positions ``0…s−1`` once, keeps their KV cache, and runs only ``s…S−1`` per intervention; one at blocks ``k…``
starts from the clean residual entering block ``k`` (as :func:`~mathcircuits.models.forward.prefix.run_from_layer`):

    forward(x)[s:]  =  blocks[k:](resid_pre_k(x)[s:] | KV(x[:s]))

After each run the cache is cut back to ``s`` positions. With ``s = S − 1`` one intervention costs one token
through ``L − k`` blocks: what makes neuron ablations over an operand grid affordable on a CPU. Checked on the
user's model before first use (:func:`check_suffix`); with fast paths off every run is the plain full forward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.models import hooks
from mathcircuits.models.forward.integrity import (
    compare,
    fast_paths_enabled,
    model_depth,
    model_dtype,
    probe_tokens,
    verify_once,
)
from mathcircuits.models.forward.prefix import PrefixRunner, blocks_from, repeat_cache, shared_prefix_len
from mathcircuits.models.hooked import HookedModel

__all__: list[str] = []

Hook = tuple[str, Any]


class SuffixRunner:
    """Clean pieces of one batch, computed once, and reruns of positions ``start…`` with hooks.

    ``start`` is the first position run again (0 caches nothing); ``check`` runs the ``"suffix rerun"`` check first.
    :attr:`logits` holds the clean logits at the last position ``[batch, vocab]``, :attr:`clean`
    ``{name: [batch, S − start, ...]}`` for ``capture`` and every ``hook_resid_pre``.
    """

    def __init__(
        self,
        model: HookedModel,
        tokens: Int[Tensor, "batch seq"],
        start: int,
        capture: Sequence[str] = (),
        check: bool = True,
    ) -> None:
        seq = tokens.shape[1]
        if not 0 <= start < seq:
            raise FixableValueError(
                f"start {start} is outside 0…{seq - 1} of these {seq}-token prompts. ", "pick a position."
            )
        self.model, self.tokens, self.start = model, tokens, start
        self.n_layers = model.spec.n_layers
        self.fast = fast_paths_enabled()
        if self.fast and check:
            verify_once(model.bridge, "suffix rerun", lambda: check_suffix(model))
        bridge = model.bridge
        self.cache: Any = None  # start 0, or fast paths off: nothing is cached
        if self.fast and start > 0:
            p = shared_prefix_len(tokens, start)
            with torch.no_grad():
                if p > 0:
                    self.cache = repeat_cache(PrefixRunner(bridge).prefix_cache(tokens[0, :p]), tokens.shape[0])
                    if start > p:
                        bridge(tokens[:, p:start], past_key_values=self.cache, logits_to_keep=1)
                else:
                    _, self.cache = bridge(tokens[:, :start], return_type="logits_and_cache", logits_to_keep=1)
        names = list(dict.fromkeys([*capture, *(hooks.resid_pre(l) for l in range(self.n_layers))]))
        self.clean: dict[str, Tensor] = {}

        def grab(name: str) -> Any:
            def hook(act: Tensor, hook: Any) -> None:  # keyed by the requested name: the bridge may report an alias
                self.clean[name] = act.detach().clone()

            return hook

        self.logits = self._forward(None, [(n, grab(n)) for n in names], 0)

    def _forward(
        self, resid: Tensor | None, fwd_hooks: Sequence[Hook], layer: int, grad: bool = False
    ) -> Float[Tensor, "batch vocab"]:
        """Logits at the last position of a run of positions ``start…`` from block ``layer`` (cache restored).

        ``resid`` replaces the residual entering block ``layer`` at positions ``start…`` (None: the clean one).
        """
        if not self.fast:
            return self._plain(resid, fwd_hooks, layer, grad)
        if resid is None:
            resid = self.resid_pre(layer) if layer > 0 else None
        try:
            with torch.set_grad_enabled(grad):
                if resid is None:
                    out = self.model.bridge.run_with_hooks(
                        self.tokens[:, self.start :],
                        fwd_hooks=list(fwd_hooks),
                        past_key_values=self.cache,
                        logits_to_keep=1,
                    )
                else:  # run_from_layer, without its no_grad (attribution differentiates through this run)
                    with blocks_from(self.model.bridge, layer):
                        out = self.model.bridge.run_with_hooks(
                            resid,
                            fwd_hooks=list(fwd_hooks),
                            start_at_layer=layer,
                            past_key_values=self.cache,
                            logits_to_keep=1,
                        )
        finally:
            self._restore()
        return out[:, -1]

    def _plain(self, resid: Tensor | None, fwd_hooks: Sequence[Hook], layer: int, grad: bool) -> Tensor:
        """The reference path: one full forward; each hook sees (and may replace) positions ``start…`` only."""
        s = self.start

        def sliced(fn: Any) -> Any:
            def hook(act: Tensor, hook: Any) -> Tensor:
                out = fn(act[:, s:], hook)
                if out is None:
                    return act
                act = act.clone()
                act[:, s:] = out
                return act

            return hook

        wrapped = [(n, sliced(fn)) for n, fn in fwd_hooks]
        if resid is not None:
            wrapped.insert(0, (hooks.resid_pre(layer), sliced(lambda act, hook: resid)))
        with torch.set_grad_enabled(grad):
            return self.model.bridge.run_with_hooks(self.tokens, fwd_hooks=wrapped)[:, -1]

    def _restore(self) -> None:
        """Cut every layer's cache back to ``start`` positions (a run from block k grows only layers k…)."""
        for layer in self.cache.layers if self.cache is not None else ():
            extra = layer.get_seq_length() - self.start
            if extra > 0:
                layer.crop(-extra)  # a negative count removes that many positions

    def resid_pre(self, layer: int) -> Float[Tensor, "batch pos d_model"]:
        """The clean residual entering block ``layer`` at positions ``start…``."""
        return self.clean[hooks.resid_pre(layer)]

    def run(
        self,
        fwd_hooks: Sequence[Hook] = (),
        from_layer: int = 0,
        resid: Float[Tensor, "batch pos d_model"] | None = None,
    ) -> Float[Tensor, "batch vocab"]:
        """Logits ``[batch, vocab]`` at the last position, ``fwd_hooks`` on positions ``start…``, from ``from_layer``.

        Args:
            fwd_hooks: they see positions ``start…`` only; hooks below ``from_layer`` would not fire and are refused.
            from_layer: the lowest block a hook touches (blocks below it are taken from the clean run).
            resid: the residual entering block ``from_layer`` at positions ``start…`` (default: the clean one);
                needs ``from_layer >= 1``.
        """
        return self._forward(self._checked(from_layer, resid, fwd_hooks), fwd_hooks, from_layer)

    def run_with_grad(
        self, fwd_hooks: Sequence[Hook] = (), from_layer: int = 0, resid: Tensor | None = None
    ) -> Float[Tensor, "batch vocab"]:
        """As :meth:`run`, with autograd on (hooks may mark activations to differentiate, e.g. attribution)."""
        return self._forward(self._checked(from_layer, resid, fwd_hooks), fwd_hooks, from_layer, grad=True)

    def _checked(self, from_layer: int, resid: Tensor | None, fwd_hooks: Sequence[Hook]) -> Tensor | None:
        if not 0 <= from_layer < self.n_layers:
            raise FixableValueError(f"from_layer {from_layer} is outside 0…{self.n_layers - 1}. ", "pick a block.")
        if resid is not None and from_layer == 0:
            raise FixableValueError(
                "a replacement residual enters a block >= 1. ", "pass from_layer >= 1, or use a hook."
            )
        below = [
            str(n) for n, _ in fwd_hooks if str(n).startswith("blocks.") and int(str(n).split(".")[1]) < from_layer
        ]
        if below:
            raise FixableValueError(
                f"hooks {below[:3]} sit below block {from_layer}, which does not run again. ", "lower from_layer."
            )
        return resid


def check_suffix(model: HookedModel) -> tuple[float, float]:
    """A rerun of the last three positions from the middle block, with a hook, against the plain forward."""
    toks = probe_tokens(model.spec.vocab_size, model.device)
    layer = max(1, model.spec.n_layers // 2)
    start = toks.shape[1] - 3

    def scale(act: Tensor, hook: Any) -> Tensor:
        act = act.clone()
        act[:, -1] = act[:, -1] * 0.5
        return act

    name = hooks.resid_pre(layer)
    run = SuffixRunner(model, toks, start)  # the check runs inside verify_once, which does not recurse
    fast = torch.stack([run.logits, run.run([(name, scale)], from_layer=layer)])
    bridge = model.bridge
    plain = torch.stack([bridge(toks)[:, -1], bridge.run_with_hooks(toks, fwd_hooks=[(name, scale)])[:, -1]])
    return compare(fast, plain, model_dtype(model), model_depth(model))
