"""Bring your own model object: an HF model or a TransformerBridge you already hold, as a :class:`HookedModel`.

Researchers come with the object already in their notebook; :func:`load_model` only takes a source name. These
functions take the object and return the toolkit's model without copying weights. Refused, and why:

* a bridge whose weights were processed (``enable_compatibility_mode()`` with its default weight processing, or
  ``process_weights()``): folding norms and centring the unembedding shift raw logits (by up to ~16 on SmolLM2),
  and the paper's metric is the relative change of the raw correct-answer logit;
* a TransformerLens 3.x ``HookedTransformer``: TransformerLens 4 (which this package needs) removed it, 3.x
  cannot be installed beside it, and its weights are processed by default too.

Both fixes: boot a bridge around the HF model with ``enable_compatibility_mode(no_processing=True)``, or call
:func:`from_hf`.
"""

from __future__ import annotations

from typing import Any

import torch
from transformer_lens.model_bridge import TransformerBridge
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from mathcircuits._checks import own_checks
from mathcircuits._errors import FixableTypeError, FixableValueError
from mathcircuits.models.compat import check_versions, install_cache_alias
from mathcircuits.models.forward.integrity import instrument_hooks
from mathcircuits.models.forward.placement import unloadable_parameters
from mathcircuits.models.forward.prefix import PrefixRunner
from mathcircuits.models.hooked import HookedModel
from mathcircuits.models.loading import boot_bridge, spec_from_bridge

__all__ = ["from_bridge", "from_hf", "wrap"]

_CONVERT = (
    "Fix: boot the HF model with TransformerBridge.boot_transformers(name, hf_model=hf_model, tokenizer=tokenizer) "
    "and call enable_compatibility_mode(no_processing=True) on it, or pass the plain HF model to "
    "mathcircuits.models.from_hf(hf_model, tokenizer)."
)


def _is_hooked_transformer(obj: Any) -> bool:
    cls = type(obj)
    return any(
        c.__name__ == "HookedTransformer" or c.__module__.startswith("transformer_lens.HookedTransformer")
        for c in cls.__mro__
    )


def _name_of(hf_model: torch.nn.Module, name: str | None) -> str:
    return name or str(getattr(hf_model.config, "name_or_path", "") or type(hf_model).__name__)


def _check_tokenizer(tokenizer: object) -> None:
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        hint = f" (the string {tokenizer!r} names one; load it first)" if isinstance(tokenizer, str) else ""
        raise FixableTypeError(
            f"the tokenizer is a {type(tokenizer).__name__}{hint}, not an HF tokenizer. ",
            "pass AutoTokenizer.from_pretrained(<the model's folder or id>).",
        )


def check_causal_lm(model: torch.nn.Module, tokenizer: object) -> None:
    """Refuse a model the toolkit cannot read answers from, before it is booted: no tokenizer or language-model head
    (``TypeError``), weights on ``meta`` that no offload hook loads, or a vocabulary smaller than the tokenizer's.
    """
    _check_tokenizer(tokenizer)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        raise FixableTypeError(
            f"{type(model).__name__} has no language-model head, so no answer logits can be read. ",
            "load it with AutoModelForCausalLM (e.g. LlamaForCausalLM, not LlamaModel).",
        )
    meta = unloadable_parameters(model)  # offloaded weights (accelerate's disk/CPU offload) are loaded by their hooks
    if meta:
        raise FixableValueError(
            f"{type(model).__name__} has {len(meta)} parameters on the meta device that no offload hook loads "
            f"(e.g. {meta[0]}): it holds no weights for them. ",
            "load it with weights (from_pretrained without "
            "init_empty_weights / device_map='meta'), or offload them with accelerate (device_map with 'cpu'/'disk' "
            "and an offload folder), which loads each layer's weights at its forward.",
        )
    vocab = int(head.weight.shape[0])
    if len(tokenizer) > vocab:
        raise FixableValueError(
            f"the tokenizer has {len(tokenizer)} tokens but {type(model).__name__}'s head only {vocab}: some token ids "
            "would index past the logits. ",
            "pass the model's own tokenizer (or resize_token_embeddings).",
        )


def from_hf(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str | None = None) -> HookedModel:
    """Wrap an HF causal LM you hold as a :class:`HookedModel`, without copying its weights.

    The model is booted into a TransformerBridge **in place**: its modules become bridge components sharing the same
    parameters, attention is set to eager, device(s) and dtype are kept. Afterwards use
    :meth:`HookedModel.plain_hf_model` (a copy) for fine-tuning or ``save_pretrained``.
    """
    if _is_hooked_transformer(model) or isinstance(model, TransformerBridge):
        return wrap(model, tokenizer, name)
    if not isinstance(model, PreTrainedModel):
        raise FixableTypeError(
            f"from_hf got a {type(model).__module__}.{type(model).__name__}, not an HF PreTrainedModel. ",
            "pass an AutoModelForCausalLM (or a TransformerBridge to from_bridge).",
        )
    if any(n.endswith("._original_component") for n, _ in model.named_modules()):
        raise FixableValueError(
            f"this {type(model).__name__} is already wrapped by a TransformerBridge (its modules are bridge "
            "components). ",
            "pass the bridge itself to from_bridge(bridge), or a fresh plain HF model.",
        )
    if tokenizer is None:
        raise FixableValueError(
            f"from_hf needs the tokenizer of {type(model).__name__} (booting without one would go to the Hub). ",
            "from_hf(model, AutoTokenizer.from_pretrained(<the model's folder or id>)).",
        )
    check_causal_lm(model, tokenizer)
    if not getattr(model.config, "architectures", None):
        model.config.architectures = [type(model).__name__]  # from_config leaves it unset; the bridge needs it
    label = _name_of(model, name)
    bridge = boot_bridge(model, tokenizer, label, device=None)
    return HookedModel(
        bridge=bridge, tokenizer=tokenizer, spec=spec_from_bridge(bridge, label, label), prefix_runner=PrefixRunner
    )


def from_bridge(
    bridge: TransformerBridge, tokenizer: PreTrainedTokenizerBase | None = None, name: str | None = None
) -> HookedModel:
    """Use a TransformerBridge you hold as a :class:`HookedModel`, if its weights are raw.

    A bridge without compatibility mode gets ``enable_compatibility_mode(no_processing=True)`` (the weights are not
    touched); one whose weights were processed is refused. ``tokenizer`` defaults to ``bridge.tokenizer``, ``name``
    to the bridge's ``cfg.model_name``.
    """
    if _is_hooked_transformer(bridge):
        return wrap(bridge, tokenizer, name)
    if not isinstance(bridge, TransformerBridge):
        raise FixableTypeError(
            f"from_bridge got a {type(bridge).__module__}.{type(bridge).__name__}, not a TransformerBridge. ",
            "pass an HF model to from_hf(model, tokenizer), or use wrap(obj, tokenizer).",
        )
    folded = bool(getattr(bridge.cfg, "layer_norm_folding", False))
    if getattr(bridge, "_weights_processed", False) or folded:
        raise FixableValueError(
            "this TransformerBridge's weights were processed (folded norms, centred writing weights and "
            "unembedding, as enable_compatibility_mode() does by default). That changes raw logits, and "
            "mathcircuits' metric is the relative change of the raw correct-answer logit (Zhang et al. 2024), so "
            "every effect would mean something else. ",
            "boot a fresh bridge with "
            "TransformerBridge.boot_transformers(name, hf_model=..., tokenizer=...) and call "
            "enable_compatibility_mode(no_processing=True).",
        )
    tok = tokenizer if tokenizer is not None else getattr(bridge, "tokenizer", None)
    if tok is None:
        raise FixableValueError("this TransformerBridge has no tokenizer. ", "from_bridge(bridge, tokenizer).")
    check_causal_lm(bridge.original_model, tok)
    check_versions()
    if not getattr(bridge, "compatibility_mode", False):
        bridge.enable_compatibility_mode(no_processing=True)
    instrument_hooks(install_cache_alias(bridge)).eval()
    label = name or str(getattr(bridge.cfg, "model_name", "") or type(bridge.original_model).__name__)
    return HookedModel(
        bridge=bridge, tokenizer=tok, spec=spec_from_bridge(bridge, label, label), prefix_runner=PrefixRunner
    )


def wrap(
    obj: PreTrainedModel | TransformerBridge | HookedModel,
    tokenizer: PreTrainedTokenizerBase | None = None,
    name: str | None = None,
) -> HookedModel:
    """The :class:`HookedModel` of any supported object: HF model (:func:`from_hf`), TransformerBridge
    (:func:`from_bridge`), or a HookedModel (returned as it is).
    """
    if isinstance(obj, HookedModel):
        return obj
    if _is_hooked_transformer(obj):
        raise TypeError(
            f"a TransformerLens {type(obj).__name__} cannot be used: mathcircuits works on a TransformerBridge "
            "around the HF model (TransformerLens 4 removed HookedTransformer), while a HookedTransformer holds "
            "converted weights with no HF model behind it, processed by default (folded norms, centred "
            f"unembedding), which changes the raw logits the paper's metric reads. {_CONVERT}"
        )
    if isinstance(obj, TransformerBridge):
        return from_bridge(obj, tokenizer, name)
    if isinstance(obj, PreTrainedModel):
        return from_hf(obj, tokenizer, name)
    raise FixableTypeError(
        f"wrap got a {type(obj).__module__}.{type(obj).__name__}. ",
        "pass an HF AutoModelForCausalLM with its tokenizer, a TransformerBridge, or a source name to load_model().",
    )


own_checks(wrap, "obj", "tokenizer")  # their own messages say what to load or pass instead
own_checks(from_hf, "model", "tokenizer")
own_checks(from_bridge, "bridge")  # a TransformerLens 3 HookedTransformer is refused with the conversion
