"""Run the tail of equal-length prompts again and again, with everything before it cached.

Method. An intervention at position ``s`` (a number's last token, or the last
position) changes nothing before ``s`` in a causal model. :class:`SuffixRunner`
therefore runs the positions ``0…s−1`` once (the batch's shared few-shot prefix
once more, via :class:`~mathcircuits.models.prefix.PrefixRunner`), keeps their KV
cache, and runs only positions ``s…S−1`` for each intervention. When the
intervention touches block ``k`` and above, the clean residual entering block
``k`` at ``s…S−1`` is kept from the clean run and only blocks ``k…`` run
(as :func:`~mathcircuits.models.prefix.run_from_layer` does):

    forward(x)[s:]  =  blocks[k:](resid_pre_k(x)[s:] | KV(x[:s]))

After each run every layer's cache is cut back to ``s`` positions (a run from block ``k`` grows only
layers ``k…``),
so the next run sees the same past. With ``s = S − 1`` one intervention costs one
token through ``L − k`` blocks, which is what makes neuron ablations over an
operand grid affordable on a CPU.

The runner checks itself when built: its clean last-position logits must equal
those of the plain prefix-cached forward (:meth:`PrefixRunner.logits_from`) to
``1e-3`` relative; a dependency upgrade that breaks the cache path fails there,
on the user's own model, instead of giving wrong effects.

Usage::

    run = SuffixRunner(model, tokens, start=tokens.shape[1] - 1, capture=[hooks.sub(3, "mlp.hook_post")])
    clean = run.logits                       # [batch, vocab] at the last position
    ablated = run.run([(name, hook)], from_layer=3)

References: the KV cache of HF ``transformers`` (``DynamicCache``); the prefix and
mid-network resumption of :mod:`mathcircuits.models.prefix`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mathcircuits.models import hooks
from mathcircuits.models.loading import HookedModel
from mathcircuits.models.prefix import PrefixRunner, blocks_from, repeat_cache, shared_prefix_len

__all__ = ["SuffixRunner"]

Hook = tuple[str, Any]


class SuffixRunner:
    """Clean pieces of one batch, computed once, and reruns of positions ``start…`` with hooks.

    Args:
        model: the hooked model.
        tokens: prompts of equal length ``S`` that share at least positions ``0…start−1`` in structure
            (they may differ there; the shared prefix is found and run once).
        start: the first position that is run again (``0 <= start < S``; 0 caches nothing).
        capture: hook names whose clean activations at positions ``start…`` are kept in :attr:`clean`.
        check: compare the clean logits with the plain prefix-cached forward (see the module docstring).

    Attributes:
        logits: the clean logits at the last position ``[batch, vocab]``.
        clean: ``{name: activation [batch, S − start, ...]}`` for ``capture`` and every ``hook_resid_pre``.
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
            raise ValueError(
                f"start {start} is outside 0…{seq - 1} of these {seq}-token prompts. Fix: pick a position."
            )
        self.model, self.tokens, self.start = model, tokens, start
        self.n_layers = model.spec.n_layers
        bridge = model.bridge
        p = shared_prefix_len(tokens, start)
        self.cache: Any = None  # start 0: nothing before the rerun positions
        with torch.no_grad():
            if start == 0:
                pass
            elif p > 0:
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

        self.logits = self._forward(tokens[:, start:], [(n, grab(n)) for n in names], 0)
        missing = [n for n in names if n not in self.clean]
        if missing:
            raise KeyError(f"the model has no hook {missing[0]!r}. Fix: use a name of mathcircuits.models.hooks.")
        if check:
            self._check()

    def _forward(self, x: Tensor, fwd_hooks: Sequence[Hook], layer: int, grad: bool = False) -> Tensor:
        """Logits at the last position of a run of positions ``start…`` entering block ``layer`` (cache restored)."""
        try:
            with torch.set_grad_enabled(grad):
                if layer == 0 and x.dtype == torch.long:
                    out = self.model.bridge.run_with_hooks(
                        x, fwd_hooks=list(fwd_hooks), past_key_values=self.cache, logits_to_keep=1
                    )
                else:  # run_from_layer, without its no_grad (attribution differentiates through this run)
                    with blocks_from(self.model.bridge, layer):
                        out = self.model.bridge.run_with_hooks(
                            x,
                            fwd_hooks=list(fwd_hooks),
                            start_at_layer=layer,
                            past_key_values=self.cache,
                            logits_to_keep=1,
                        )
        finally:
            self._restore()
        return out[:, -1]

    def _restore(self) -> None:
        """Cut every layer's cache back to ``start`` positions (a run from block k grows only layers k…)."""
        for layer in self.cache.layers if self.cache is not None else ():
            extra = layer.get_seq_length() - self.start
            if extra > 0:
                layer.crop(-extra)  # a negative count removes that many positions

    def _check(self) -> None:
        plain = PrefixRunner(self.model.bridge).logits_from(self.tokens, self.tokens.shape[1] - 1)[:, -1]
        err = float((plain - self.logits).abs().max())
        scale = float(plain.abs().max()) or 1.0
        if err > 1e-3 * scale:
            raise RuntimeError(
                f"the cached suffix path gives logits {err:.3g} away from the plain forward (scale {scale:.3g}) on "
                "this model, so its interventions would be wrong. Fix: check the transformers / TransformerLens "
                "versions (mathcircuits.models.compat) or report the model; the plain path is PrefixRunner."
            )

    def resid_pre(self, layer: int) -> Float[Tensor, "batch pos d_model"]:
        """The clean residual entering block ``layer`` at positions ``start…``."""
        return self.clean[hooks.resid_pre(layer)]

    def run(
        self,
        fwd_hooks: Sequence[Hook] = (),
        from_layer: int = 0,
        resid: Float[Tensor, "batch pos d_model"] | None = None,
    ) -> Float[Tensor, "batch vocab"]:
        """Logits at the last position with ``fwd_hooks`` on positions ``start…``, running blocks ``from_layer…``.

        Args:
            fwd_hooks: ``(hook name, fn)`` pairs; they see positions ``start…`` only. Hooks below
                ``from_layer`` do not fire.
            from_layer: the lowest block a hook touches (blocks below it are taken from the clean run).
            resid: the residual entering block ``from_layer`` at positions ``start…`` (default: the clean one);
                needs ``from_layer >= 1``.

        Returns:
            ``[batch, vocab]`` logits.
        """
        return self._forward(self._input(from_layer, resid), fwd_hooks, from_layer)

    def run_with_grad(
        self, fwd_hooks: Sequence[Hook] = (), from_layer: int = 0, resid: Tensor | None = None
    ) -> Float[Tensor, "batch vocab"]:
        """As :meth:`run`, with autograd on (hooks may mark activations to differentiate, e.g. attribution)."""
        return self._forward(self._input(from_layer, resid), fwd_hooks, from_layer, grad=True)

    def _input(self, from_layer: int, resid: Tensor | None) -> Tensor:
        if not 0 <= from_layer < self.n_layers:
            raise ValueError(f"from_layer {from_layer} is outside 0…{self.n_layers - 1}. Fix: pick a block.")
        if resid is not None and from_layer == 0:
            raise ValueError("a replacement residual enters a block >= 1. Fix: pass from_layer >= 1, or use a hook.")
        if resid is not None:
            return resid
        return self.tokens[:, self.start :] if from_layer == 0 else self.resid_pre(from_layer)
