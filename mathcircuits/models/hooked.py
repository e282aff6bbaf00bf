"""The hooked model: a TransformerBridge with its tokenizer and :class:`~mathcircuits.models.ModelSpec`.

It imports nothing from models/ but the spec: the forward mechanics (:mod:`.forward`) take a
:class:`HookedModel`, so they sit above it. The prefix-cached forward behind :meth:`HookedModel.logits_from`
and :meth:`HookedModel.prefix_cached` is handed in by :mod:`.loading` and :mod:`.wrap`, which build it.
Studies call the model (these methods) and the public names of :mod:`mathcircuits.models`, never
:mod:`.forward`'s modules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
from jaxtyping import Int
from transformer_lens.model_bridge import TransformerBridge
from transformers import AutoModelForCausalLM, Cache, PreTrainedTokenizerBase

from mathcircuits._errors import FixableRuntimeError, FixableValueError
from mathcircuits.models.spec import ModelSpec

__all__ = ["HookedModel", "PrefixCaches"]

#: The KV caches of shared prefixes, by the prefix's tokens: filled by one runner, reused by the next.
PrefixCaches = dict[tuple[int, ...], Cache]


def _hook_device(module: torch.nn.Module) -> torch.device | None:
    hook = getattr(module, "_hf_hook", None)
    for h in getattr(hook, "hooks", None) or ([hook] if hook is not None else []):  # SequentialHook or one hook
        dev = getattr(h, "execution_device", None)
        if dev is not None:
            return torch.device(dev if not isinstance(dev, int) else f"cuda:{dev}")
    return None


def execution_device(module: torch.nn.Module) -> torch.device:
    """The device ``module`` computes on: its (or its first submodule's) accelerate hook's, else its weights'.

    The CPU for a module without weights or hooks.
    """
    for sub in module.modules():
        dev = _hook_device(sub)
        if dev is not None:
            return dev
    for t in module.parameters():
        if t.device.type != "meta":
            return t.device
    return torch.device("cpu")


@runtime_checkable
class PrefixCached(Protocol):
    """A forward that runs each batch's shared prefix once (:class:`~mathcircuits.models.PrefixRunner`)."""

    def logits_from(self, tokens: torch.Tensor, start: int) -> torch.Tensor: ...

    def prefix_cache(self, prefix: torch.Tensor) -> Any: ...

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor: ...


@dataclass(repr=False)
class HookedModel:
    """A TransformerBridge (hook names as HookedTransformer) with its tokenizer and shape facts.

    ``hf_model`` is the wrapped HF model, whose modules the bridge replaced in place (for fine-tuning use
    :meth:`plain_hf_model` or :func:`load_hf_model`). ``prefix_runner`` builds the prefix-cached runners of
    :meth:`prefix_cached` and :meth:`logits_from` (:class:`~mathcircuits.models.PrefixRunner`, passed by the
    loaders); without one, :meth:`logits_from` runs the whole forward.
    """

    bridge: TransformerBridge
    tokenizer: PreTrainedTokenizerBase
    spec: ModelSpec
    prefix_runner: Callable[..., PrefixCached] | None = field(default=None, compare=False)

    @property
    def hf_model(self) -> torch.nn.Module:
        return self.bridge.original_model

    @property
    def device(self) -> torch.device:
        """Where inputs go: the embedding's execution device (on a model split by accelerate, not ``meta``)."""
        return execution_device(getattr(self.bridge, "embed", self.bridge))

    @property
    def dtype(self) -> torch.dtype:
        """The precision its forwards run in: the dtype of its first floating parameter (float32 without one)."""
        for p in self.bridge.parameters():
            if p.is_floating_point():
                return p.dtype
        return torch.float32

    def layer_device(self, layer: int) -> torch.device:
        """Where block ``layer`` computes (the blocks of a model split by accelerate differ)."""
        return execution_device(self.bridge.blocks[layer])

    def output_device(self) -> torch.device:
        """Where the final norm and the unembedding compute: where the answer is read out."""
        return execution_device(self.bridge.unembed)

    def __repr__(self) -> str:
        # one line: the bridge's own repr lists every module (thousands of lines)
        s = self.spec
        dtype = str(next(self.hf_model.parameters()).dtype).removeprefix("torch.")
        return (
            f"HookedModel({s.name!r}, layers={s.n_layers}, heads={s.n_heads}, kv_heads={s.n_kv_heads}, "
            f"dtype={dtype}, device={self.device})"
        )

    def to_tokens(self, texts: str | list[str]) -> Int[torch.Tensor, "batch seq"]:
        """Token ids ``[batch, seq]`` on the model's device, without a BOS token (the bridge's string path adds one).

        The texts must tokenize to the same length; a single text gives batch 1.
        """
        if isinstance(texts, str):
            texts = [texts]
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        lengths = {len(i) for i in ids}
        if len(lengths) != 1:
            raise ValueError(
                f"to_tokens got texts of different token lengths {sorted(lengths)}; tokenize them one by one or pad."
            )
        return torch.tensor(ids, dtype=torch.long, device=self.device)

    def __call__(self, tokens: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return self.bridge(tokens, **kwargs)

    def logits_from(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        """Logits at positions ``start…`` with the batch's shared prefix run once (:class:`PrefixRunner`)."""
        if self.prefix_runner is None:
            return self.bridge(tokens)[:, start:]
        return self.prefix_runner(self.bridge).logits_from(tokens, start)

    def prefix_cached(
        self,
        fwd_hooks: Sequence[tuple[str, Any]] = (),
        prefix_hooks: Sequence[tuple[str, Any]] | None = None,
        store: PrefixCaches | None = None,
    ) -> PrefixCached:
        """This model's forward with ``fwd_hooks``, each batch's shared prefix run once (checked on first use).

        ``prefix_hooks`` act on the prefix run (``None``: clean); ``store`` shares prefix KV caches between runners
        with the same ``prefix_hooks``. See :class:`~mathcircuits.models.PrefixRunner`.
        """
        if self.prefix_runner is None:
            raise FixableRuntimeError(
                "this HookedModel was built without its prefix-cached forward. ",
                "build it with mathcircuits.models.load_model or wrap.",
            )
        return self.prefix_runner(self.bridge, fwd_hooks, prefix_hooks, store=store)

    def plain_hf_model(self) -> torch.nn.Module:
        """A separate plain HF model with this model's current weights, for fine-tuning or ``save_pretrained``.

        Booting the bridge replaced the HF model's modules in place (PEFT, :class:`HeadSliceAdapter` and
        ``save_pretrained`` need plain modules), so this builds the architecture from its config and copies the weights
        in: one more copy of the model in memory, on its device, in eval mode with eager attention. For models you can
        reload from files, :func:`load_hf_model` does the same without the hooked model.
        """
        hf = self.hf_model
        placed = set(map(str, (getattr(hf, "hf_device_map", None) or {}).values()))
        if len(placed) > 1:
            raise FixableValueError(
                f"this model is spread over {sorted(placed)} by a device_map, and a plain copy would be put on one "
                "device. ",
                "load the plain copy from files with load_hf_model(source, device_map=...).",
            )
        plain = AutoModelForCausalLM.from_config(hf.config, attn_implementation="eager", dtype=hf.dtype)
        wanted = plain.state_dict()
        state = {k.replace("._original_component", ""): v for k, v in hf.state_dict().items()}
        state = {k: v for k, v in state.items() if k in wanted}  # drop the bridge's alias entries
        missing = [k for k in wanted if k not in state and not _is_tied(plain, k)]
        if missing:
            raise FixableRuntimeError(
                f"the bridged {type(hf).__name__} does not map back onto a plain one (missing {missing[:5]}). ",
                "load a plain copy from files with load_hf_model().",
            )
        plain.load_state_dict(state, strict=False)
        plain.config.name_or_path = hf.config.name_or_path
        return plain.to(self.device).eval()


def _is_tied(model: torch.nn.Module, key: str) -> bool:
    return key.startswith("lm_head.") and getattr(model.config, "tie_word_embeddings", False)
