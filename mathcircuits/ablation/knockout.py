"""Knockout by mean ablation: are the key heads necessary? (Zhang et al. 2024, §3.3)

A knocked-out head's output ``hook_z`` (per query head, before ``W_O``) is
replaced, at every position, by its **mean over all counterfactual prompts of
the dataset and over all their token positions** — one vector per head. The
counterfactual prompts carry the same tokens as the task minus the operator's
meaning, so this mean keeps the head's typical output scale but removes the
arithmetic information. Being position-free, the same mean applies to prompts
of any length (other templates, word problems). ``scope="last"`` ablates only
at the last position instead.

Accuracy is the full-answer criterion of :func:`mathcircuits.data.score_pairs`
(teacher-forced greedy decoding of every answer token).

The knockout curve removes heads one by one in effect-rank order (most
negative path-patching effect first) and, for comparison, in random orders
over all heads (several seeds; mean and spread), as in the paper's Figure 3.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._io import SavedResult
from mathcircuits.data.batching import iter_batches
from mathcircuits.data.filter import score_pairs
from mathcircuits.models import hooks

__all__ = ["HeadMeans", "KnockoutResult", "head_means", "ablated_model", "ablated_accuracy", "knockout_curve"]


@dataclass(frozen=True)
class HeadMeans(SavedResult):
    """Mean ``hook_z`` per head over the counterfactual prompts: [layer, head, d_head]."""

    means: Float[Tensor, "layer head d_head"]
    n_prompts: int
    source: str = "counterfactual prompts, all positions"



@torch.no_grad()
def head_means(model: Any, dataset: Any, column: str = "cf_tokens", batch_size: int = 32) -> HeadMeans:
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
    names = [hooks.z(layer) for layer in range(spec.n_layers)]
    total = torch.zeros(spec.n_layers, spec.n_heads, spec.d_head, dtype=torch.float64)
    count = 0
    seqs = dataset[column]
    for _, batch in iter_batches({"tokens": seqs}, batch_size, model.device):
        toks = batch["tokens"]
        sums: dict[int, Tensor] = {}

        def make(layer: int) -> Any:
            def hook(act: Tensor, hook: Any) -> None:
                sums[layer] = act.double().sum(dim=(0, 1)).cpu()

            return hook

        model.bridge.run_with_hooks(toks, fwd_hooks=[(n, make(layer)) for layer, n in enumerate(names)])
        for layer in range(spec.n_layers):
            total[layer] += sums[layer]
        count += toks.numel()
    return HeadMeans(means=(total / count).float(), n_prompts=len(seqs))


def _hooks(model: Any, heads: Sequence[tuple[int, int]], means: HeadMeans, scope: str) -> list[tuple[str, Any]]:
    by_layer: dict[int, list[int]] = {}
    for l, h in heads:
        model.spec.check_head(l, h)
        by_layer.setdefault(l, []).append(h)
    out = []  # hook_z is per query head on every family, so this touches exactly the ablated heads
    for layer, hs in by_layer.items():
        idx = torch.tensor(hs)
        value = means.means[layer, idx].to(model.device)

        def hook(act: Tensor, hook: Any, idx: Tensor = idx, value: Tensor = value) -> Tensor:
            act = act.clone()
            if scope == "last":
                act[:, -1, idx] = value.to(act.dtype)
            else:
                act[:, :, idx] = value.to(act.dtype)
            return act

        out.append((hooks.z(layer), hook))
    return out


def ablated_model(model: Any, heads: Sequence[tuple[int, int]], means: HeadMeans, scope: str = "all"):
    """A callable tokens → logits with ``heads`` mean-ablated (for :func:`score_pairs`)."""
    if scope not in ("all", "last"):
        raise ValueError(f"scope {scope!r} is unknown. Fix: use 'all' or 'last'.")
    hooks = _hooks(model, heads, means, scope)

    def run(tokens: Tensor) -> Tensor:
        return model.bridge.run_with_hooks(tokens, fwd_hooks=hooks) if hooks else model.bridge(tokens)

    return run


def ablated_accuracy(model: Any, dataset: Any, heads: Sequence[tuple[int, int]], means: HeadMeans, scope: str = "all", batch_size: int = 32) -> float:
    """Share of pairs answered correctly with ``heads`` mean-ablated."""
    scored = score_pairs(ablated_model(model, heads, means, scope), dataset, batch_size=batch_size, device=model.device)
    return float(sum(scored["correct"]) / len(scored))


@dataclass(frozen=True)
class KnockoutResult(SavedResult):
    """Accuracy as heads are knocked out: in effect-rank order and in random orders."""

    ks: list[int]
    ranked_accuracy: list[float]
    random_accuracy: Float[Tensor, "seed k"]
    baseline_accuracy: float
    operation: str
    ranked_heads: list[tuple[int, int]] = field(default_factory=list)
    n_pairs: int = 0
    scope: str = "all"
    seeds: list[int] = field(default_factory=list)


    def to_dataframe(self):
        import pandas as pd

        rnd = self.random_accuracy
        return pd.DataFrame(
            {
                "k": self.ks,
                "ranked_accuracy": self.ranked_accuracy,
                "random_mean": rnd.mean(0).tolist(),
                "random_std": (rnd.std(0) if rnd.shape[0] > 1 else torch.zeros(rnd.shape[1])).tolist(),
                "ranked_drop": [a - self.baseline_accuracy for a in self.ranked_accuracy],
                "random_drop": [float(a) - self.baseline_accuracy for a in rnd.mean(0)],
            }
        )


def knockout_curve(
    model: Any,
    dataset: Any,
    patching: Any,
    max_k: int = 10,
    n_random: int = 3,
    seed: int = 0,
    means: HeadMeans | None = None,
    scope: str = "all",
    progress: bool = False,
) -> KnockoutResult:
    """Knock out 0..max_k heads in effect-rank order and in ``n_random`` random orders."""
    from tqdm.auto import tqdm

    spec = model.spec
    if patching.model.get("name") != spec.name or tuple(patching.head_effects.shape) != (spec.n_layers, spec.n_heads):
        raise ValueError(f"the patching result was computed on {patching.model.get('name')!r}, not {spec.name!r}. Fix: path-patch this model first.")
    means = means or head_means(model, dataset)
    ranked = [(l, h) for l, h, _ in patching.top_heads(max_k)]
    ks = list(range(0, len(ranked) + 1))
    all_heads = [(l, h) for l in range(spec.n_layers) for h in range(spec.n_heads)]
    rng = random.Random(seed)
    orders = [rng.sample(all_heads, len(ranked)) for _ in range(n_random)]
    bar = tqdm(total=len(ks) * (1 + n_random), disable=not progress, desc="knockout")
    base = ablated_accuracy(model, dataset, [], means, scope)
    ranked_acc = []
    for k in ks:
        ranked_acc.append(base if k == 0 else ablated_accuracy(model, dataset, ranked[:k], means, scope))
        bar.update()
    rand = torch.zeros(n_random, len(ks))
    for s, order in enumerate(orders):
        for j, k in enumerate(ks):
            rand[s, j] = base if k == 0 else ablated_accuracy(model, dataset, order[:k], means, scope)
            bar.update()
    bar.close()
    ops = sorted(set(dataset["operation"])) if "operation" in dataset.column_names else ["?"]
    return KnockoutResult(
        ks=ks, ranked_accuracy=ranked_acc, random_accuracy=rand, baseline_accuracy=base, operation="+".join(ops),
        ranked_heads=ranked, n_pairs=len(dataset), scope=scope, seeds=[seed],
    )
