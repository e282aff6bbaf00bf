"""The ablations of the heuristic-neuron analysis: keep only a layer's top-k, knock out associated or random neurons.

Both replace neurons at the prompt's last position by their mean over the operand grid (mean ablation, as
Nikankin et al. 2025). The random knockout draws, per prompt and layer, as many neurons of the same layer as the
prompt has associated ones, never an associated one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from mathcircuits._codec import Fixed, FlatSpec
from mathcircuits.numbers.grid import mlp_post
from mathcircuits.numbers.results import quantile
from mathcircuits.stats import Interval, Uncertainty
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
    """Associated-neuron knockout against layer-matched random knockouts (:mod:`.neurons`, point 4).

    ``associated``: accuracy with each prompt's associated neurons knocked out (Wilson over the ``n_prompts``);
    ``random``: the mean accuracy of the ``n_random`` random knockouts, with their spread (the draws' quantiles);
    ``drop``: how much more the associated knockout loses (paired bootstrap over prompts). Saved flat, as before
    the intervals were values (``associated_accuracy``, ``associated_low``, …, ``extra_drop``, ``drop_low``,
    ``drop_high``); the level and seed are not saved (the run's).
    """

    n_prompts: int
    mean_associated: float
    associated: Interval
    random: Interval
    drop: Interval
    n_random: int

    FLAT: ClassVar[dict[str, FlatSpec]] = {
        "associated": {"value": "associated_accuracy", "low": "associated_low", "high": "associated_high",
                       "n": "n_prompts", "method": Fixed("wilson")},
        "random": {"value": "random_accuracy", "low": "random_low", "high": "random_high", "n": "n_random",
                   "method": Fixed("draw_quantiles")},
        "drop": {"value": "extra_drop", "low": "drop_low", "high": "drop_high", "n": "n_prompts",
                 "method": Fixed("paired_bootstrap")},
    }  # fmt: skip
    SAVED_ORDER: ClassVar[tuple[str, ...]] = (
        "n_prompts", "mean_associated", "associated_accuracy", "associated_low", "associated_high",
        "random_accuracy", "random_low", "random_high", "extra_drop", "drop_low", "drop_high", "n_random",
    )  # fmt: skip


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
    spread = Interval(
        float(draws.mean()),
        float(quantile(draws, alpha / 2)),
        float(quantile(draws, 1 - alpha / 2)),
        n_random,
        uncertainty.confidence,
        "draw_quantiles",
    )
    return NeuronKnockout(
        n_prompts=len(assoc),
        mean_associated=float(count.mean()),
        associated=a_iv,
        random=spread,
        drop=d,
        n_random=n_random,
    )
