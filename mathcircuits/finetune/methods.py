"""How each SFT method prepares the model it trains: one strategy per method, in the table :data:`METHODS`.

Everything else about a run (data, optimizer, schedule, checkpoints) is the same for every method: ``precise``
wraps the model in a :class:`~mathcircuits.finetune.HeadSliceAdapter` on the key components' slices, ``lora`` in
PEFT LoRA on every attention projection, ``full`` trains every parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from torch import nn

from mathcircuits._errors import FixableValueError
from mathcircuits.finetune.adapter import HeadSliceAdapter
from mathcircuits.finetune.config import SFTConfig
from mathcircuits.finetune.layouts import resolve_layout
from mathcircuits.finetune.modes import SFTMethod
from mathcircuits.finetune.slices import head_slices
from mathcircuits.finetune.sliceset import SliceSet
from mathcircuits.patching import KeyComponents

__all__: list[str] = []

#: A method's strategy: (model, key components or slices, config, model name) → the module to train.
Prepare: TypeAlias = Callable[[nn.Module, KeyComponents | SliceSet | None, SFTConfig, str | None], nn.Module]


def lora_targets(model: nn.Module) -> tuple[str, ...]:
    """The attention projections LoRA adapts: the q, k, v, o modules of the model's layout (as PEFT suffixes)."""
    layout = resolve_layout(model)
    return tuple(dict.fromkeys(layout.projection(r).module for r in ("q", "k", "v", "o")))


def lora_model(model: nn.Module, rank: int, alpha: float = 16.0, dropout: float = 0.0) -> nn.Module:
    """Wrap ``model`` in a PEFT LoRA model on its attention projections (:func:`lora_targets`).

    Each adapted ``[out, in]`` weight gains ``rank·(in + out)`` parameters; the update is ``alpha / r · B A``;
    ``dropout=0`` keeps it deterministic, as the other modes. Only the LoRA matrices require gradients.
    """
    from peft import LoraConfig, get_peft_model  # heavy, optional at import

    cfg = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(lora_targets(model)))
    return get_peft_model(model, cfg)


def _precise(
    model: nn.Module, key: KeyComponents | SliceSet | None, config: SFTConfig, model_name: str | None
) -> nn.Module:
    if isinstance(model, HeadSliceAdapter):
        if key is not None:
            raise FixableValueError(
                "train_sft got an adapter and a key selection. ",
                "pass one of them (the adapter already fixes the slices).",
            )
        return model
    if key is None:
        raise FixableValueError(
            "precise SFT got no key components. ",
            "pass key=KeyComponents (or a SliceSet), or use SFTConfig(mode='full').",
        )
    slices = (
        key
        if isinstance(key, SliceSet)
        else head_slices(
            model, key, kv_policy=config.kv_policy, include_mlps=config.include_mlps, model_name=model_name
        )
    )
    return HeadSliceAdapter(model, slices, grad_scale=config.grad_scale)


def _lora(
    model: nn.Module, key: KeyComponents | SliceSet | None, config: SFTConfig, model_name: str | None
) -> nn.Module:
    if isinstance(model, HeadSliceAdapter):
        raise FixableValueError("LoRA SFT got a HeadSliceAdapter. ", "pass the plain HF model.")
    return lora_model(model, config.lora_rank, config.lora_alpha)


def _full(
    model: nn.Module, key: KeyComponents | SliceSet | None, config: SFTConfig, model_name: str | None
) -> nn.Module:
    if isinstance(model, HeadSliceAdapter):
        raise FixableValueError(
            "full SFT got a HeadSliceAdapter. ",
            "pass the plain HF model (adapter.merge_and_unload() or a fresh load_hf_model()).",
        )
    model.requires_grad_(True)
    return model


#: Each SFT method's strategy (the ``mode`` of :class:`~mathcircuits.finetune.SFTConfig` is the key).
METHODS: dict[SFTMethod, Prepare] = {"precise": _precise, "lora": _lora, "full": _full}
