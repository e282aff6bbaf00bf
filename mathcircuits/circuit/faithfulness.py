"""Faithfulness and minimality of a circuit (Wang et al. 2023, §4), and random circuits of equal size.

Every head outside the circuit is mean-ablated (its ``hook_z`` replaced, at every position, by its
mean over the counterfactual prompts: :func:`mathcircuits.ablation.head_means`); MLPs stay. With
``F`` the mean log-probability of the answer's first token at the last position::

    faithfulness(C) = (F(C) − F(∅)) / (F(M) − F(∅))

where ``M`` is the full model and ``∅`` ablates every head. The interval resamples pairs (one
bootstrap of the ratio of means). Minimality: for each head ``v`` of the circuit, the drop
``faithfulness(C) − faithfulness(C \\ {v})``. Random circuits: ``n_random`` head sets of the
circuit's size drawn uniformly from all heads, each scored the same way.

Usage::

    faith = faithfulness(model, ds, circuit, means=head_means(model, ds))
    faith.faithfulness, (faith.low, faith.high), faith.random_share_below
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits.ablation import HeadMeans, ablated_model, head_means
from mathcircuits.circuit.result import Circuit, Faithfulness, FaithfulnessSettings
from mathcircuits.data.batching import iter_batches
from mathcircuits.data.pairs import PairSet, check_token_aligned
from mathcircuits.models import Head, HookedModel
from mathcircuits.stats import bootstrap_statistic

__all__ = ["answer_logprob", "faithfulness"]


@torch.no_grad()
def answer_logprob(
    model: HookedModel, dataset: PairSet, ablate: Sequence[tuple[int, int]], means: HeadMeans, batch_size: int = 16
) -> Float[Tensor, " pair"]:
    """Log-probability of each pair's answer token at the last position, with ``ablate`` mean-ablated.

    Args:
        model: the hooked model.
        dataset: pairs with ``tokens`` and ``answer_token``.
        ablate: heads to mean-ablate at every position.
        means: their means (:func:`mathcircuits.ablation.head_means`).
        batch_size: prompts per forward.

    Returns:
        One value per pair, in dataset order.
    """
    run = ablated_model(model, list(ablate), means)
    out = torch.empty(len(dataset))
    cols = {"tokens": dataset["tokens"], "answer": dataset["answer_token"]}
    for idx, b in iter_batches(cols, batch_size, model.device):
        logits = run(b["tokens"])[:, -1].float()
        out[idx] = torch.log_softmax(logits, -1).gather(-1, b["answer"][:, None])[:, 0].cpu()
    return out


def _ratio_of_means(rows: Tensor) -> float:
    return float(rows[:, 0].mean() / rows[:, 1].mean())


def faithfulness(
    model: HookedModel,
    dataset: PairSet,
    circuit: Circuit,
    means: HeadMeans | None = None,
    n_random: int = 20,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    batch_size: int = 16,
) -> Faithfulness:
    """Faithfulness of the circuit's heads, each head's minimality, and random circuits of the same size.

    Args:
        model: the hooked model the circuit was found on.
        dataset: the pairs to score on (e.g. the ones the circuit was found with, or held-out ones).
        circuit: a :class:`Circuit`.
        means: head means (taken over ``dataset``'s counterfactual prompts when not given).
        n_random: random circuits of equal size.
        n_boot, confidence, seed: the bootstrap over pairs and the random draws.
        batch_size: prompts per forward.

    Returns:
        A :class:`Faithfulness`.
    """
    circuit.check_model(model)
    check_token_aligned(dataset, model.spec.vocab_size)
    means = means if means is not None else head_means(model, dataset)
    means.check_model(model)
    spec = model.spec
    every = [(layer, head) for layer in range(spec.n_layers) for head in range(spec.n_heads)]
    kept = circuit.heads

    def outside(heads: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        keep = set(heads)
        return [h for h in every if h not in keep]

    f_full = answer_logprob(model, dataset, [], means, batch_size)
    f_none = answer_logprob(model, dataset, every, means, batch_size)
    gap = f_full - f_none
    if abs(float(gap.mean())) < 1e-6:
        raise ValueError(
            "ablating every head leaves the answer's log-probability unchanged, so faithfulness is undefined. "
            "Fix: check the head means (they should come from counterfactual prompts) and the dataset."
        )

    def share(heads: Sequence[tuple[int, int]]) -> tuple[float, Tensor]:
        f = answer_logprob(model, dataset, outside(heads), means, batch_size)
        return float((f - f_none).mean() / gap.mean()), f

    value, f_c = share(kept)
    joint = torch.stack([f_c - f_none, gap], 1)  # pairs resampled jointly: one interval of the ratio of means
    iv = bootstrap_statistic(joint, _ratio_of_means, n_boot=n_boot, seed=seed, confidence=confidence)
    low, high = iv.low, iv.high
    minimality = {str(Head(*h)): value - share([k for k in kept if k != h])[0] for h in kept}
    rng = random.Random(seed)
    rand = tuple(share(rng.sample(every, len(kept)))[0] for _ in range(n_random))
    return Faithfulness(
        model=spec,
        heads=tuple(kept),
        faithfulness=value,
        low=low,
        high=high,
        f_full=float(f_full.mean()),
        f_circuit=float(f_c.mean()),
        f_none=float(f_none.mean()),
        minimality=minimality,
        random=rand,
        n_pairs=len(dataset),
        confidence=confidence,
        settings=FaithfulnessSettings(n_random=n_random, n_boot=n_boot, seed=seed, means=means.source),
    )
