"""The value a key-component selection is: :class:`KeyComponents`, where it came from, and the heads it names.

It records the model identity and shape, so using it with another model fails clearly
(:func:`resolve_heads` is the one check). Saved as JSON.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import get_args

import pandas as pd
from torch import nn

from mathcircuits._errors import FixableError, FixableTypeError
from mathcircuits._io import SavedResult
from mathcircuits.data import GenerationConfig
from mathcircuits.models import HookedModel
from mathcircuits.models.heads import Head, check_heads
from mathcircuits.models.spec import ModelSpec, check_model, heads_by_layer
from mathcircuits.patching.config import Rule, SelectionConfig
from mathcircuits.patching.result import PatchingResult

__all__ = [
    "KeyComponents",
    "SelectionError",
    "SelectionSource",
]

RULES: tuple[str, ...] = get_args(Rule)  # the choices, read off the Literal the config shares


class SelectionError(FixableError, ValueError):
    """A key-component selection does not fit the model or the request."""


@dataclass(frozen=True)
class SelectionSource:
    """Where a selection came from.

    ``fallback``: why it is not the configured rule's; ``note``: how a selection no rule made came about;
    ``pair_keys``: fingerprints of the pairs that chose it (:func:`~mathcircuits.data.pairset.pair_keys`), so scoring
    it on them warns of selection bias.
    """

    metric: str = ""
    method: str = ""
    n_pairs: int = 0
    operations: tuple[str, ...] = ()
    data: GenerationConfig | None = None
    fallback: str | None = None
    note: str | None = None
    pair_keys: tuple[str, ...] = ()


@dataclass(frozen=True, repr=False)
class KeyComponents(SavedResult):
    """Key heads ``[(layer, head)]`` and key MLPs ``[layer]``, with their scores and provenance.

    ``selection`` is ``None`` for heads no rule chose. Stability (:func:`selection_stability`; empty when
    not measured): ``stability[i]`` is the share of bootstrap resamples selecting ``heads[i]`` again;
    ``stability_others`` maps heads ("L3.H1") selected by ≥ 10% of resamples to their share;
    ``stability_sizes``/``stability_depths`` are, per resample, the count and median relative depth
    (NaN when a resample selects none).
    """

    STAGE = "identify"
    VERSION = 4

    model: ModelSpec
    heads: tuple[Head, ...]
    mlps: tuple[int, ...] = ()
    head_scores: tuple[float, ...] = ()
    mlp_scores: tuple[float, ...] = ()
    selection: SelectionConfig | None = SelectionConfig()
    source: SelectionSource = SelectionSource()
    stability: tuple[float, ...] = ()
    stability_others: dict[str, float] = field(default_factory=dict)
    stability_sizes: tuple[int, ...] = ()
    stability_depths: tuple[float, ...] = ()
    stability_n_boot: int = 0
    stability_seed: int = 0

    @property
    def rule(self) -> str:
        """The selection rule's name (``"none"`` when no rule chose these heads)."""
        return self.selection.rule if self.selection is not None else "none"

    @property
    def rule_params(self) -> dict[str, float | int]:
        """The rule's settings besides its name (empty when no rule chose these heads)."""
        if self.selection is None:
            return {}
        return {f.name: getattr(self.selection, f.name) for f in dataclasses.fields(self.selection) if f.name != "rule"}

    @property
    def has_stability(self) -> bool:
        """Whether :func:`selection_stability` filled the stability fields."""
        return self.stability_n_boot > 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", tuple(Head.of(h) for h in self.heads))
        object.__setattr__(self, "mlps", tuple(int(layer) for layer in self.mlps))
        spec = self.model
        for layer, head in self.heads:
            if not (0 <= layer < spec.n_layers and 0 <= head < spec.n_heads):
                raise SelectionError(
                    f"head ({layer}, {head}) is out of range for {spec.describe()}. ",
                    f"use layers 0..{spec.n_layers - 1} and heads 0..{spec.n_heads - 1}.",
                )
        for layer in self.mlps:
            if not 0 <= layer < spec.n_layers:
                raise SelectionError(
                    f"MLP {layer} is out of range for {spec.describe()}. ", f"use layers 0..{spec.n_layers - 1}."
                )
        bad = [x for x in (*self.head_scores, *self.mlp_scores) if not math.isfinite(x)]
        if bad:
            raise SelectionError(f"scores {bad} are not finite. ", "select from a result without NaN or infinity.")

    @property
    def head_fraction(self) -> float:
        return len(self.heads) / (self.model.n_layers * self.model.n_heads)

    def heads_by_layer(self) -> dict[int, list[int]]:
        """``{layer: [head, ...]}`` of the key heads."""
        return heads_by_layer(self.heads)

    def check_model(self, model: ModelSpec | HookedModel | nn.Module, compare_name: bool = True) -> None:
        """Refuse (:class:`SelectionError`) a model other than the one the selection was made on.

        ``compare_name=False`` skips the names (a plain HF model does not know its load name).
        """
        check_model(
            self.model,
            model,
            "this key-component selection",
            "select key components on this model (mathcircuits identify)",
            compare_name=compare_name,
            error=SelectionError,
        )

    def to_dataframe(self):
        """One row per key component: kind, layer, head (``<NA>`` for MLPs), score, and for heads the share of
        bootstrap resamples that select it again (``stability``; NaN when not measured and for MLPs)."""

        nan = float("nan")
        nan_h, nan_m = [nan] * len(self.heads), [nan] * len(self.mlps)
        stab = self.stability or nan_h
        rows = [
            {"kind": "head", "layer": layer, "head": head, "score": s, "stability": st}
            for (layer, head), s, st in zip(self.heads, self.head_scores or nan_h, stab)
        ]
        rows += [
            {"kind": "mlp", "layer": layer, "head": None, "score": s, "stability": nan}
            for layer, s in zip(self.mlps, self.mlp_scores or nan_m)
        ]
        df = pd.DataFrame(rows, columns=["kind", "layer", "head", "score", "stability"])
        return df.astype({"layer": "int64", "head": "Int64"})  # an MLP has no head: <NA>, not a fake -1

    def summary_items(self) -> list[tuple[str, str]]:
        """Model, rule, the key heads and MLPs, and how often resamples select them again (for ``repr``)."""
        heads = ", ".join(str(Head.of(h)) for h in self.heads[:6]) + (" …" if len(self.heads) > 6 else "")
        stab = f"{min(self.stability):.0%}–{max(self.stability):.0%}" if self.stability else "not measured"
        return [
            ("model", self.model.name),
            ("rule", self.rule),
            (f"{len(self.heads)} heads", heads or "none"),
            ("MLPs", ", ".join(map(str, self.mlps)) or "none"),
            ("selected again", stab),
        ]


def median_depth(layers: Sequence[int], n_layers: int) -> float:
    """Median of ``layers`` as a share of the depth, ``layer / (n_layers − 1)``, in [0, 1]; NaN for no layer."""
    return statistics.median(layers) / max(1, n_layers - 1) if len(layers) else float("nan")


def resolve_heads(
    heads: KeyComponents | Iterable[tuple[int, int]], spec: ModelSpec, *, allow_empty: bool = False, arg: str = "heads"
) -> tuple[Head, ...]:
    """The heads to act on: a selection's heads (after checking it was made on this model), or the heads given.

    ``allow_empty`` accepts no head (a knockout of nothing); ``arg`` names the argument in errors. Raises
    :class:`SelectionError` for a selection of another model; TypeError for a ``PatchingResult`` (effects,
    not heads) or a non-sequence; ValueError/IndexError for no, repeated or out-of-range heads.
    """
    if isinstance(heads, KeyComponents):
        heads.check_model(spec)
        heads = heads.heads
    elif isinstance(heads, PatchingResult):
        raise FixableTypeError(
            f"{arg} got a PatchingResult (every head's effect), not a set of heads. ",
            "pass "
            "select_key_components(result) (a KeyComponents), or [(layer, head), ...], e.g. "
            "[(l, h) for l, h, _ in result.top_heads(5)].",
        )
    elif isinstance(heads, (str, bytes)) or not isinstance(heads, Iterable):
        raise FixableTypeError(
            f"{arg} got a {type(heads).__name__}, not a set of heads. ",
            "pass a KeyComponents (select_key_components(result)) or [(layer, head), ...].",
        )
    return check_heads(heads, spec, allow_empty=allow_empty)
