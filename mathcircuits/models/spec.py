"""The one model identity of mathcircuits: :class:`ModelSpec`, and the one check that a value fits a model.

Every result and selection that depends on a model (patching effects, key components, head means, parameter
slices, SFT results, analyses) stores the :class:`ModelSpec` of the model it was made on. Before a library
function uses such a value with a model, it calls :func:`check_model`, which compares the identity (name,
architecture and the shape facts that decide what a head index means). Without this, the key heads of one model
run silently on another whose shape happens to admit their indices. A plain HF model knows only
``config.name_or_path``, so comparisons with one can leave the name out (``compare_name=False``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

from torch import nn

from mathcircuits._errors import FixableError, FixableTypeError
from mathcircuits._files import JSONObject
from mathcircuits._io import decode_fields

__all__ = [
    "ModelMismatchError",
    "ModelSpec",
]

#: The facts two models must share for a head or MLP index to mean the same thing (besides the name).
IDENTITY_KEYS: tuple[str, ...] = ("architecture", "n_layers", "n_heads", "n_kv_heads", "d_head", "d_model")


class ModelMismatchError(FixableError, ValueError):
    """A value made on one model was given together with another model."""


@dataclass(frozen=True)
class ModelSpec:
    """Identity and shape facts of a model, as later stages need them.

    ``name`` is the name the model was loaded under (``"tiny-llama"``), ``source`` what was passed to ``load_model``
    (or the HF ``name_or_path``), ``architecture`` the HF class, ``model_type`` the HF ``config.model_type`` (which
    selects the weight layout).
    """

    name: str
    source: str
    architecture: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_model: int
    d_mlp: int
    vocab_size: int
    model_type: str = ""

    @property
    def n_components(self) -> int:
        return self.n_layers * self.n_heads + self.n_layers

    @property
    def group_size(self) -> int:
        """Query heads per key/value head (1 without grouped-query attention)."""
        return self.n_heads // self.n_kv_heads

    def to_dict(self) -> JSONObject:
        """The spec as a plain dict of its fields (JSON-ready)."""
        return asdict(self)

    def fingerprint(self) -> str:
        """``name:hash`` of every field: what scored pairs record (column ``scored_by``) to tell which model
        found them correct."""
        digest = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.name}:{digest}"

    @classmethod
    def from_dict(cls, d: JSONObject) -> ModelSpec:
        """Rebuild a spec from :meth:`to_dict`; an unknown or missing key is an error naming it."""
        d = dict(d)
        d.setdefault("model_type", "")  # specs written before model_type was recorded
        return decode_fields(cls, d, "the model spec")

    @classmethod
    def from_hf(cls, model: nn.Module, name: str | None = None, source: str | None = None) -> ModelSpec:
        """The spec of a plain HF causal LM, read from its config.

        ``name`` defaults to ``config.name_or_path``, else the class name; ``source`` to the name.
        """
        cfg = model.config
        n_heads = int(cfg.num_attention_heads)
        d_model = int(cfg.hidden_size)
        n_kv = int(getattr(cfg, "num_key_value_heads", None) or n_heads)
        d_head = int(getattr(cfg, "head_dim", None) or d_model // n_heads)
        d_mlp = getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None) or 4 * d_model
        name = name if name is not None else str(getattr(cfg, "name_or_path", "") or type(model).__name__)
        return cls(
            name=name,
            source=source if source is not None else name,
            architecture=type(model).__name__,
            n_layers=int(cfg.num_hidden_layers),
            n_heads=n_heads,
            n_kv_heads=n_kv,
            d_head=d_head,
            d_model=d_model,
            d_mlp=int(d_mlp),
            vocab_size=int(cfg.vocab_size),
            model_type=str(cfg.model_type),
        )

    def check_head(self, layer: int, head: int) -> None:
        """Raise ``IndexError`` if ``(layer, head)`` does not exist in this model."""
        if not 0 <= layer < self.n_layers:
            raise IndexError(f"layer {layer} is out of range for {self.name}: it has layers 0..{self.n_layers - 1}.")
        if not 0 <= head < self.n_heads:
            raise IndexError(
                f"head {head} is out of range for {self.name}: each layer has heads 0..{self.n_heads - 1}."
            )

    def describe(self) -> str:
        """A short human description: ``'tiny-llama' (LlamaForCausalLM, 3 layers × 4 heads)``."""
        return f"{self.name!r} ({self.architecture}, {self.n_layers} layers × {self.n_heads} heads)"


@runtime_checkable
class Bridged(Protocol):
    """What placement and the integrity checks read of a model: its bridge, the HF model inside, and its spec.

    :class:`~mathcircuits.models.HookedModel` is one; so is any stand-in with these three.
    """

    @property
    def bridge(self) -> nn.Module: ...

    @property
    def hf_model(self) -> nn.Module: ...

    @property
    def spec(self) -> ModelSpec: ...


def as_spec(value: ModelSpec | JSONObject | Bridged | nn.Module) -> ModelSpec:
    """The :class:`ModelSpec` of a spec, its dict, a hooked model (anything with a ``spec``) or a plain HF model."""
    if isinstance(value, ModelSpec):
        return value
    if isinstance(value, dict):
        return ModelSpec.from_dict(value)
    if isinstance(getattr(value, "spec", None), ModelSpec):
        return value.spec
    if hasattr(value, "config"):
        return ModelSpec.from_hf(value)
    raise FixableTypeError(
        f"cannot tell which model a {type(value).__name__} is. ",
        "pass a ModelSpec, a hooked model from load_model(), or an HF model.",
    )


def check_model(
    stored: ModelSpec,
    model: ModelSpec | Bridged | nn.Module,
    what: str,
    fix: str,
    compare_name: bool = True,
    error: type[FixableError] = ModelMismatchError,
    plural: bool = False,
) -> None:
    """Refuse ``model`` when it is not the model a value was made on: raise ``error`` naming both models and ``fix``.

    ``what`` names the value for the message (``"this key-component selection"``, plural when ``plural``), ``fix``
    how to get one for this model; leave the name out (``compare_name=False``) for a plain HF model, which does not
    know the name it was loaded under.
    """
    actual = as_spec(model)
    keys = (("name",) if compare_name else ()) + IDENTITY_KEYS
    diff = {k: (getattr(stored, k), getattr(actual, k)) for k in keys if getattr(stored, k) != getattr(actual, k)}
    if diff:
        detail = ", ".join(f"{k} {a!r} vs {b!r}" for k, (a, b) in diff.items())
        was, does = ("were", "do") if plural else ("was", "does")
        raise error(
            f"{what} {was} made on {stored.describe()} and {does} not fit this model, {actual.describe()} "
            f"(differs in {detail}).",
            f"{fix}.",
        )


def heads_by_layer(heads: Any) -> dict[int, list[int]]:
    """Group ``(layer, head)`` pairs by layer, in the given order: ``{layer: [head, ...]}``."""
    out: dict[int, list[int]] = {}
    for layer, head in heads:
        out.setdefault(int(layer), []).append(int(head))
    return out
