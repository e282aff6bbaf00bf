"""The ablations of the heuristic-neuron analysis: keep only a layer's top-k, knock out associated or random neurons.

Both replace neurons at the prompt's last position by their mean over the operand grid (mean ablation, as
Nikankin et al. 2025). The random knockout draws, per prompt and layer, as many neurons of the same layer as the
prompt has associated ones, never an associated one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from mathcircuits.numbers.grid import mlp_post
from mathcircuits.numbers.results import quantile
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.bootstrap import paired_bootstrap
from mathcircuits.stats.interval import wilson_interval

__all__ = [
    "LayerTopK",
    "NeuronKnockout",
]


@dataclass(frozen=True)
class LayerTopK:
    """Accuracy of one layer with only its top-``k`` neurons kept, per tried ``k``; ``chosen`` is the sufficient k
    (the layer's width when no tried k keeps accuracy within the margin)."""

    layer: int
    ks: tuple[int, ...]
    accuracy: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    chosen: int


@dataclass(frozen=True)
class NeuronKnockout:
    """Associated-neuron knockout against layer-matched random knockouts (:mod:`.neurons`, point 4)."""

    n_prompts: int
    mean_associated: float
    associated_accuracy: float
    associated_low: float
    associated_high: float
    random_accuracy: float
    random_low: float
    random_high: float
    extra_drop: float
    drop_low: float
    drop_high: float
    n_random: int


def ablate(masks: dict[int, Tensor], means: dict[int, Tensor]) -> list[tuple[str, Any]]:
    """Hooks that replace, at the last position, the neurons where ``masks[layer]`` is True by their means."""

    def make(layer: int) -> Any:
        def hook(act: Tensor, hook: Any) -> Tensor:
            act = act.clone()
            m = masks[layer].to(act.device)
            act[:, -1] = torch.where(m, means[layer].to(act), act[:, -1])
            return act

        return hook

    return [(mlp_post(l), make(l)) for l in masks]


def random_like(assoc: Tensor, gen: torch.Generator) -> Tensor:
    """Per prompt and layer, as many random neurons as ``assoc`` marks, drawn from the layer's other neurons."""
    scores = torch.rand(assoc.shape, generator=gen).masked_fill(assoc, -1.0)  # associated neurons are never drawn
    counts = assoc.sum(-1, keepdim=True)
    rank = scores.argsort(-1, descending=True).argsort(-1)
    return rank < counts


def summarise_knockout(per: dict[str, list[Any]], n_random: int, uncertainty: Uncertainty) -> NeuronKnockout:
    assoc = torch.cat([a for a, _ in per["assoc"]])
    count = torch.cat([c for _, c in per["assoc"]])
    rand = torch.cat(per["random"])  # [prompt, draw]
    a_iv = wilson_interval(int(assoc.sum()), len(assoc), uncertainty.confidence)
    draws = rand.mean(0)
    alpha = 1 - uncertainty.confidence
    d = paired_bootstrap(rand.mean(1), assoc, uncertainty)
    return NeuronKnockout(
        n_prompts=len(assoc),
        mean_associated=float(count.mean()),
        associated_accuracy=a_iv.value,
        associated_low=a_iv.low,
        associated_high=a_iv.high,
        random_accuracy=float(draws.mean()),
        random_low=float(quantile(draws, alpha / 2)),
        random_high=float(quantile(draws, 1 - alpha / 2)),
        extra_drop=d.value,
        drop_low=d.low,
        drop_high=d.high,
        n_random=n_random,
    )
