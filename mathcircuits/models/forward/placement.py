"""Where a model's weights live and where each computation runs: one device, or split by accelerate.

A model too big for one device is split with accelerate (``device_map="auto"``, ``dispatch_model``). Each module
then has an *execution device*; *offloaded* modules (to CPU memory or disk) keep their parameters on ``meta``
and an ``AlignDevicesHook`` loads the weights onto the execution device for each forward. A forward is correct
as it is (the hooks move activations); what breaks is code that reads a weight directly (``W_O`` of a head, a
column of ``W_U``) or combines tensors cached at different layers. This module gives those readers one answer
each. On a model on one device every function returns what ``model.bridge.W_O[layer]``,
``model.bridge.W_U[:, cols]`` and ``model.device`` give.

References: accelerate's big-model inference (``dispatch_model``, ``AlignDevicesHook``,
``align_module_device``), https://huggingface.co/docs/accelerate/usage_guides/big_modeling.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from accelerate.utils import align_module_device, has_offloaded_params
from jaxtyping import Float, Int
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.models.hooked import execution_device
from mathcircuits.models.spec import Bridged

__all__ = [
    "check_trainable_placement",
]


def _offloaded_owners(module: torch.nn.Module) -> list[torch.nn.Module]:
    seen: set[int] = set()
    out = []
    for sub in module.modules():
        own_meta = any(p.device.type == "meta" for p in sub.parameters(recurse=False))
        if own_meta and has_offloaded_params(sub) and id(sub) not in seen:
            seen.add(id(sub))
            out.append(sub)
    return out


@contextlib.contextmanager
def materialized(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Within the block, every offloaded weight of ``module`` is a real tensor on its execution device.

    A module without offloaded weights is left as it is (no copy). Afterwards the offloaded weights go back
    to ``meta``; tensors read inside the block stay valid.
    """
    with contextlib.ExitStack() as stack:
        for sub in _offloaded_owners(module):
            stack.enter_context(align_module_device(sub))
        yield module


def offloaded_parameters(hf_model: torch.nn.Module) -> list[str]:
    """Names of the ``meta`` parameters that an accelerate offload hook loads at each forward."""
    out = []
    for name, sub in hf_model.named_modules():
        if has_offloaded_params(sub):
            out += [f"{name}.{n}" if name else n for n, p in sub.named_parameters(recurse=False) if p.is_meta]
    return out


def unloadable_parameters(hf_model: torch.nn.Module) -> list[str]:
    """Names of the ``meta`` parameters that no offload hook fills: the model holds no weights for them."""
    filled = set(offloaded_parameters(hf_model))
    return [n for n, p in hf_model.named_parameters() if p.is_meta and n not in filled]


def devices_of(model: Bridged) -> list[torch.device]:
    """The distinct execution devices of the model's blocks and its unembedding, in layer order."""
    out: list[torch.device] = []
    for dev in [layer_device(model, l) for l in range(model.spec.n_layers)] + [output_device(model)]:
        if dev not in out:
            out.append(dev)
    return out


def is_split(model: Bridged) -> bool:
    """Whether the model runs on more than one device or has offloaded weights."""
    return len(devices_of(model)) > 1 or bool(offloaded_parameters(model.hf_model))


def layer_device(model: Bridged, layer: int) -> torch.device:
    """The execution device of block ``layer``."""
    return execution_device(model.bridge.blocks[layer])


def output_device(model: Bridged) -> torch.device:
    """The execution device of the unembedding (where the answer is read out)."""
    return execution_device(model.bridge.unembed)


def head_out_weight(model: Bridged, layer: int) -> Float[Tensor, "head d_head d_model"]:
    """``W_O`` of every head of block ``layer``, on the block's execution device (offloaded weights loaded)."""
    attn = model.bridge.blocks[layer].attn
    with materialized(attn):
        return attn.W_O.detach().to(layer_device(model, layer))


def unembed_columns(
    model: Bridged, columns: Int[Tensor, " n"] | slice
) -> tuple[Float[Tensor, "d_model n"], Float[Tensor, " n"] | None]:
    """``(W_U[:, columns], b_U[columns])`` (bias ``None`` without one), on the output device.

    Reading only the columns needed (the answers, or one chunk of the vocabulary) bounds the readout's memory;
    with offloaded weights the whole matrix is loaded for the duration of the call.
    """
    bridge = model.bridge
    dev = output_device(model)
    cols = columns.to(dev) if isinstance(columns, Tensor) else columns
    with materialized(bridge.unembed):
        w_u = bridge.W_U[:, cols].detach().to(dev)
        b_u = getattr(bridge, "b_U", None)
        bias = b_u[cols].detach().to(dev) if b_u is not None and torch.is_tensor(b_u) else None
    if bias is not None and not bool(bias.any()):  # an all-zero bias (the bridge gives Llama one): adding it is a no-op
        bias = None
    return w_u, bias


class HeadOutWeights:
    """``W_O`` of every layer, indexed like the bridge's ``W_O`` (``w[layer]``, ``w[layer, heads]``), read per layer.

    The bridge's ``W_O`` stacks every layer's weights on each access, which an offloaded layer cannot give and a
    split model would have to gather on one device. This reads one layer at a time (on its device) and keeps what
    it read for its own lifetime: hold one per call, not per model.
    """

    def __init__(self, model: Bridged) -> None:
        self.model = model
        spec = model.spec
        self.shape = torch.Size([spec.n_layers, spec.n_heads, spec.d_head, spec.d_model])
        self.dtype = next(iter(model.bridge.parameters())).dtype
        self._layers: dict[int, Tensor] = {}

    def __getitem__(self, key: int | tuple) -> Tensor:
        layer, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        if layer not in self._layers:
            self._layers[layer] = head_out_weight(self.model, int(layer))
        w = self._layers[layer]
        return w[rest] if rest else w


def head_out_weights(model: Bridged) -> Tensor | HeadOutWeights:
    """``W_O`` of every layer ``[layer, head, d_head, d_model]``: the bridge's tensor on one device, else per layer.

    A :class:`HeadOutWeights`, with the same indexing, when the model is split or has offloaded weights.
    """
    return HeadOutWeights(model) if is_split(model) else model.bridge.W_O


def check_trainable_placement(hf_model: torch.nn.Module) -> None:
    """Refuse to fine-tune a model split by a ``device_map`` or with offloaded weights, naming the alternative.

    Training a split model layer by layer leaves every GPU but one idle, and offloaded weights are reloaded at every
    forward and backward and cannot be updated in place; :func:`mathcircuits.finetune.train_sft` has not been run
    that way.
    """
    placed = sorted({str(v) for v in (getattr(hf_model, "hf_device_map", None) or {}).values()})
    offloaded = offloaded_parameters(hf_model)
    if len(placed) > 1 or offloaded:
        where = f"spread over {placed}" if len(placed) > 1 else f"{len(offloaded)} offloaded parameters"
        raise FixableValueError(
            f"fine-tuning a model split by a device_map ({where}) is not supported: its layers would train one "
            "device at a time and offloaded weights cannot be updated in place. ",
            "train data-parallel with a "
            "whole copy per GPU (torchrun / accelerate launch -m mathcircuits.finetune.launch, DDP), or shard the "
            "frozen base with FSDP or DeepSpeed ZeRO-3 through accelerate (docs/howto/big-models-on-gpu.md); "
            "the identification stages do run on a split model.",
        )
