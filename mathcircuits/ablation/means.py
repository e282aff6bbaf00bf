"""Position-free head means: the replacement values of the ``mean`` ablation (Zhang et al. 2024, §3.3).

Each head's output ``hook_z`` (per query head, before ``W_O``) is averaged over
the counterfactual prompts of a dataset **and over all their token positions**,
giving one ``d_head`` vector per head. Being position-free, the same mean applies
to prompts of any length (other templates, word problems). The per-position and
resampling ablations take their values from aligned counterfactual prompts
instead (:class:`mathcircuits.ablation.KnockoutScorer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor, nn

from mathcircuits._io import SavedResult
from mathcircuits.data.batching import iter_batches
from mathcircuits.data.pairs import PairSet, check_columns
from mathcircuits.models import HookedModel, hooks
from mathcircuits.models.prefix import PrefixRunner
from mathcircuits.models.spec import ModelSpec, as_spec, check_model

__all__ = ["HeadMeans", "head_means"]


@dataclass(frozen=True, repr=False)
class HeadMeans(SavedResult):
    """Mean ``hook_z`` per head over the counterfactual prompts: [layer, head, d_head].

    ``model`` is the spec of the model the means were taken on (``None`` only for
    means built by hand, which then cannot be checked against a model).
    """

    STAGE = "validate"

    means: Float[Tensor, "layer head d_head"]
    n_prompts: int
    source: str = "counterfactual prompts, all positions"
    model: ModelSpec | None = None

    def __post_init__(self) -> None:
        if not bool(torch.isfinite(self.means).all()):
            raise ValueError(
                "the head means hold NaN or infinity (e.g. taken over an empty dataset). "
                "Fix: compute them with head_means() on a non-empty dataset."
            )

    @classmethod
    def upgrade(cls, version: int, fields: dict[str, Any]) -> dict[str, Any]:
        """Version 1 did not record the model: such means load without identity (their shape is still checked)."""
        return {"model": None, **fields}

    def check_model(self, model: ModelSpec | HookedModel | nn.Module) -> None:
        """Refuse a model other than the one the means were taken on.

        Args:
            model: a hooked model or a ModelSpec.

        Returns:
            None; raises an error naming both models (or the shapes) and the fix.
        """
        spec = as_spec(model)
        if self.model is not None:
            check_model(self.model, spec, "these head means", "compute head_means() on this model")
        want = (spec.n_layers, spec.n_heads, spec.d_head)
        if tuple(self.means.shape) != want:
            raise ValueError(
                f"the head means have shape {tuple(self.means.shape)} but {spec.describe()} needs {want} "
                "[layer, head, d_head]. Fix: compute head_means() on this model."
            )

    def summary_items(self) -> list[tuple[str, str]]:
        """Model, prompts averaged over, and the means' shape [layer, head, d_head]."""
        return [
            ("model", self.model.name if self.model is not None else "?"),
            ("prompts", str(self.n_prompts)),
            ("means", f"tensor{list(self.means.shape)}"),
            ("source", self.source),
        ]


@torch.no_grad()
def head_means(model: HookedModel, dataset: PairSet, column: str = "cf_tokens", batch_size: int = 32) -> HeadMeans:
    """Mean of every head's ``hook_z`` over the prompts in ``column``, all positions.

    Args:
        model: the hooked model.
        dataset: pairs with a ``column`` of token lists.
        column: which prompts to average over (the counterfactual ones by default).
        batch_size: prompts per forward.

    Returns:
        :class:`HeadMeans` with one ``d_head`` vector per head.
    """
    spec = model.spec
    check_columns(dataset, (column,), "head_means")
    names = [hooks.z(layer) for layer in range(spec.n_layers)]
    total = torch.zeros(spec.n_layers, spec.n_heads, spec.d_head, dtype=torch.float64)
    count = 0
    seqs = dataset[column]
    cols = {"tokens": seqs, "template_id": dataset["template_id"]} if "template_id" in dataset.column_names else None
    for _, batch in iter_batches(cols or {"tokens": seqs}, batch_size, model.device, group_by="template_id"):
        toks = batch["tokens"]

        def make(layer: int, weight: int) -> Any:
            def hook(act: Tensor, hook: Any) -> None:  # the prefix run has one row standing for `weight` rows
                total[layer] += weight * act.double().sum(dim=(0, 1)).cpu()

            return hook

        # the shared prefix runs once (weighted by the batch size), then the suffixes
        suffix_hooks = [(n, make(layer, 1)) for layer, n in enumerate(names)]
        prefix_hooks = [(n, make(layer, toks.shape[0])) for layer, n in enumerate(names)]
        PrefixRunner(model.bridge, suffix_hooks, prefix_hooks).logits_from(toks, toks.shape[1] - 1)
        count += toks.numel()
    return HeadMeans(means=(total / count).float(), n_prompts=len(seqs), model=spec)
