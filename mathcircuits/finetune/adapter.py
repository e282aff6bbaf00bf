"""HeadSliceAdapter: trainable deltas on exactly the key components' parameter slices.

Precise SFT (Zhang et al., ICML 2024, §5) updates only the key heads and MLPs. Masking the gradients of whole
weights is not enough: AdamW's decoupled weight decay still moves masked entries, and the optimizer keeps state for
every entry. Here the frozen base model never enters the optimizer. Each tuned slice gets a trainable delta of the
slice's shape, and a forward hook on the owning ``nn.Linear`` / ``Conv1D`` adds its contribution to the output:

* output-feature slice (q/k/v rows): ``y[..., idx] += x @ ΔW`` (and ``+ Δb``);
* input-feature slice (o columns):   ``y += x[..., idx] @ ΔW``;
* whole parameter (key MLPs):        ``y += x @ ΔW + Δb``;

with ``ΔW`` in ``[in, out]`` orientation. The effective weight is ``W + scatter(ΔW)``, the backward pass computes
weight gradients only for the slices (the speed and memory win over full SFT), and ``W`` stays bit-identical.

Artifact. PEFT 0.21 cannot select heads (its targets are whole modules or parameters; docs/finetune.md), so this
adapter follows PEFT's conventions: ``adapter_config.json`` (slice set, base model, settings) and
``adapter_model.safetensors`` holding only ``<param>.delta`` and ``<param>.index`` (indices along the sliced axis;
absent for whole parameters), with ``save_pretrained`` / ``from_pretrained`` / ``merge_and_unload``.

Example::

    adapter = HeadSliceAdapter(model, head_slices(model, key))
    adapter.save_pretrained("out/adapter")
    merged = HeadSliceAdapter.from_pretrained(load_hf_model("embedded")[0], "out/adapter").merge_and_unload()
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import Any, TypedDict

import torch
from jaxtyping import Float
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from mathcircuits._codec import Encoded
from mathcircuits._errors import FixableFileNotFoundError
from mathcircuits._files import JSONObject, atomic_path, read_json, write_json
from mathcircuits._version import __version__
from mathcircuits.finetune.slices import KVPolicy, ParamSlice, SliceError, SliceSet

__all__ = [
    "HeadSliceAdapter",
    "TrainableSummary",
]

ADAPTER_CONFIG_NAME = "adapter_config.json"
ADAPTER_WEIGHTS_NAME = "adapter_model.safetensors"
ADAPTER_TYPE = "mathcircuits/head-slice"


def _key(name: str) -> str:
    return name.replace(".", "__")  # ParameterDict keys may not contain dots


class TrainableSummary(TypedDict):
    """What :meth:`HeadSliceAdapter.trainable_summary` counts."""

    n_tuned: int
    n_model_params: int
    fraction: float
    per_role: dict[str, int]
    heads: int
    mlps: int
    kv_policy: KVPolicy


class HeadSliceAdapter(nn.Module):
    """An HF causal LM plus trainable deltas on the parameter slices of a :class:`SliceSet`.

    ``forward``/``generate`` are the base model's. ``grad_scale=True`` multiplies each attention delta's gradient by
    ``H/h`` (the paper's per-layer rescaling); ``trainable=False`` freezes the deltas too (like PEFT's
    ``is_trainable=False``).
    """

    def __init__(self, model: nn.Module, slices: SliceSet, grad_scale: bool = True, trainable: bool = True) -> None:
        super().__init__()
        slices.check_model(model)
        self.base_model = model
        self.slices = slices
        self.grad_scale = grad_scale
        self._requires_grad_before = {n: p.requires_grad for n, p in model.named_parameters()}
        model.requires_grad_(False)
        params = dict(model.named_parameters(remove_duplicate=False))
        self.deltas = nn.ParameterDict()
        self.index = nn.Module()  # holds the index buffers so that .to(device) moves them
        for s in slices.slices:
            p = params[s.name]
            self.deltas[_key(s.name)] = nn.Parameter(
                torch.zeros(s.slice_shape, dtype=p.dtype, device=p.device), requires_grad=trainable
            )
            if not s.whole:
                self.index.register_buffer(_key(s.name), s.indices().to(p.device), persistent=False)
        self._handles: list[Any] = []
        by_module: dict[str, list[ParamSlice]] = defaultdict(list)
        for s in slices.slices:
            by_module[s.module].append(s)
        modules = dict(model.named_modules())
        for name, group in by_module.items():
            self._handles.append(modules[name].register_forward_hook(partial(self._add_deltas, tuple(group))))
        if grad_scale and trainable:
            for name, scale in slices.grad_scales().items():
                if scale != 1.0:
                    self._handles.append(self.deltas[_key(name)].register_hook(partial(_scale_grad, scale)))
        self._unloaded = False

    # ------------------------------------------------------------------ forward

    def _add_deltas(
        self, group: tuple[ParamSlice, ...], module: nn.Module, args: tuple, output: torch.Tensor
    ) -> torch.Tensor:
        x = args[0]
        y = output
        for s in group:
            d = self.deltas[_key(s.name)]
            if s.kind == "bias":
                y = (
                    y + d
                    if s.whole
                    else y.index_add(-1, getattr(self.index, _key(s.name)), d.expand(*y.shape[:-1], -1))
                )
                continue
            w = d if s.weight_layout == "in_out" else d.T  # [in, out] orientation
            if s.whole:
                y = y + x @ w
            elif s.feature == "out":
                y = y.index_add(-1, getattr(self.index, _key(s.name)), x @ w)
            else:
                y = y + x.index_select(-1, getattr(self.index, _key(s.name))) @ w
        return y

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._unloaded:
            raise RuntimeError("this adapter was unloaded (merge_and_unload/unload); use the returned model instead.")
        return self.base_model(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        return self.base_model.generate(*args, **kwargs)

    @property
    def config(self) -> Any:
        return self.base_model.config

    @property
    def accepts_loss_kwargs(self) -> bool:
        """Mirror the base model, so that HF Trainer normalises the loss under gradient accumulation."""
        if hasattr(self.base_model, "accepts_loss_kwargs"):
            return bool(self.base_model.accepts_loss_kwargs)
        return any(
            p.kind == inspect.Parameter.VAR_KEYWORD
            for p in inspect.signature(self.base_model.forward).parameters.values()
        )

    def get_base_model(self) -> nn.Module:
        return self.base_model

    # ------------------------------------------------------------------ inspection

    def delta(self, name: str) -> nn.Parameter:
        """The delta tensor of HF parameter ``name``."""
        try:
            return self.deltas[_key(name)]
        except KeyError:
            raise KeyError(
                f"{name!r} is not tuned by this adapter; tuned: {[s.name for s in self.slices.slices]}"
            ) from None

    def base_values(self, name: str) -> Float[Tensor, "..."]:
        """The frozen base values of the slice of ``name`` (the shape of its delta)."""
        s = self.slices.by_name()[name]
        p = self.base_model.get_parameter(name)
        return p.detach() if s.whole else p.detach().index_select(s.axis, getattr(self.index, _key(name)))

    def named_deltas(self) -> list[tuple[ParamSlice, nn.Parameter]]:
        return [(s, self.deltas[_key(s.name)]) for s in self.slices.slices]

    @property
    def n_trainable(self) -> int:
        return sum(p.numel() for p in self.deltas.values() if p.requires_grad)

    def trainable_summary(self) -> TrainableSummary:
        """Counts of tuned parameters, in total and per role (PEFT's print_trainable_parameters, as a value)."""
        per_role: dict[str, int] = defaultdict(int)
        for s in self.slices.slices:
            per_role["mlp" if "mlp" in s.roles else "+".join(s.roles)] += s.n_params
        return {
            "n_tuned": self.slices.n_tuned,
            "n_model_params": self.slices.n_model_params,
            "fraction": self.slices.fraction,
            "per_role": dict(per_role),
            "heads": len(self.slices.heads),
            "mlps": len(self.slices.mlps),
            "kv_policy": self.slices.kv_policy,
        }

    # ------------------------------------------------------------------ save / load

    def adapter_config(self) -> Encoded:

        return {
            "adapter_type": ADAPTER_TYPE,
            "version": 1,
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": str(getattr(self.base_model.config, "name_or_path", "")),
            "grad_scale": self.grad_scale,
            "mathcircuits_version": __version__,
            "slices": self.slices.to_dict(),
        }

    def save_pretrained(self, save_directory: str | Path, **_: Any) -> Path:
        """Write ``adapter_config.json`` and ``adapter_model.safetensors`` (deltas and indices only)."""

        out = Path(save_directory)
        out.mkdir(parents=True, exist_ok=True)
        tensors: dict[str, torch.Tensor] = {}
        for s, d in self.named_deltas():
            tensors[f"{s.name}.delta"] = d.detach().cpu().contiguous()
            if not s.whole:
                tensors[f"{s.name}.index"] = getattr(self.index, _key(s.name)).cpu().contiguous()
        with atomic_path(out / ADAPTER_WEIGHTS_NAME) as tmp:
            save_file(tensors, str(tmp), metadata={"format": "pt", "adapter_type": ADAPTER_TYPE})
        write_json(out / ADAPTER_CONFIG_NAME, self.adapter_config())
        return out

    @staticmethod
    def read_config(path: str | Path) -> JSONObject:
        path = Path(path)
        cfg = read_json(path / ADAPTER_CONFIG_NAME)
        if cfg.get("adapter_type") != ADAPTER_TYPE:
            raise SliceError(
                f"{path / ADAPTER_CONFIG_NAME} is not a mathcircuits head-slice adapter "
                f"(adapter_type={cfg.get('adapter_type')!r}). ",
                "a PEFT adapter loads with peft.PeftModel.from_pretrained; pass a folder written by "
                "HeadSliceAdapter.save_pretrained.",
            )
        return cfg

    @classmethod
    def from_pretrained(cls, model: nn.Module, path: str | Path, is_trainable: bool = False) -> "HeadSliceAdapter":
        """Wrap ``model`` (a plain HF model of the same architecture) with the adapter saved at ``path``."""
        cfg = cls.read_config(path)
        slices = SliceSet.from_dict(cfg["slices"], source=f"the slices of {Path(path) / ADAPTER_CONFIG_NAME}")
        adapter = cls(model, slices, grad_scale=bool(cfg.get("grad_scale", True)), trainable=is_trainable)
        adapter.load_weights(path)
        return adapter

    def load_weights(self, path: str | Path) -> None:
        """Load saved deltas into this adapter (same slices), e.g. to resume training."""

        path = Path(path)
        file = path / ADAPTER_WEIGHTS_NAME
        if not file.exists():
            raise FixableFileNotFoundError(
                f"{file} does not exist. ", "pass a folder written by HeadSliceAdapter.save_pretrained."
            )
        saved = self.read_config(path)["slices"]
        if SliceSet.from_dict(saved, source=f"the slices of {path / ADAPTER_CONFIG_NAME}").slices != self.slices.slices:
            raise SliceError(
                f"the adapter at {path} tunes other slices than this adapter. ",
                "build the adapter with HeadSliceAdapter.from_pretrained.",
            )
        tensors = load_file(str(file))
        expected = {f"{s.name}.delta" for s in self.slices.slices} | {
            f"{s.name}.index" for s in self.slices.slices if not s.whole
        }
        if set(tensors) != expected:
            raise SliceError(f"{file} holds tensors {sorted(set(tensors) ^ expected)} that do not match its config.")
        with torch.no_grad():
            for s, d in self.named_deltas():
                if not s.whole and not torch.equal(tensors[f"{s.name}.index"], s.indices()):
                    raise SliceError(f"{file}: the index of {s.name} disagrees with the config's ranges {s.ranges}.")
                d.copy_(tensors[f"{s.name}.delta"].to(d.dtype))

    # ------------------------------------------------------------------ merge

    def unload(self) -> nn.Module:
        """Remove the hooks without merging; the base model is returned as it was."""
        for h in self._handles:
            h.remove()
        self._handles = []
        for n, p in self.base_model.named_parameters():
            p.requires_grad_(self._requires_grad_before.get(n, True))
        self._unloaded = True
        return self.base_model

    @torch.no_grad()
    def merge_and_unload(self) -> nn.Module:
        """Add the deltas into the base weights and return the plain HF model (``save_pretrained`` works on it)."""
        if self._unloaded:
            raise RuntimeError("this adapter was already unloaded; merging twice would add the deltas twice.")
        for s, d in self.named_deltas():
            p = self.base_model.get_parameter(s.name)
            if s.whole:
                p.add_(d.to(p.dtype))
            else:
                p.index_add_(s.axis, getattr(self.index, _key(s.name)), d.to(p.dtype))
        return self.unload()


def _scale_grad(scale: float, grad: torch.Tensor) -> torch.Tensor:
    return grad * scale
