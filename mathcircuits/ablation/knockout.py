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

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from mathcircuits._io import SavedResult
from mathcircuits.data.batching import iter_batches
from mathcircuits.data.filter import score_pairs
from mathcircuits.models import hooks
from mathcircuits.models.prefix import PrefixRunner
from mathcircuits.models.spec import ModelSpec, as_spec, check_model
from mathcircuits.stats import wilson_interval

__all__ = ["HeadMeans", "KnockoutResult", "head_means", "ablated_model", "ablated_accuracy", "knockout_curve"]


@dataclass(frozen=True)
class HeadMeans(SavedResult):
    """Mean ``hook_z`` per head over the counterfactual prompts: [layer, head, d_head].

    ``model`` is the spec of the model the means were taken on (``None`` only for
    means built by hand, which then cannot be checked against a model).
    """

    STAGE = "validate"

    means: Float[Tensor, "layer head d_head"]
    n_prompts: int
    source: str = "counterfactual prompts, all positions"
    model: ModelSpec | dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.model is not None:
            object.__setattr__(self, "model", as_spec(self.model))
        if not bool(torch.isfinite(self.means).all()):
            raise ValueError(
                "the head means hold NaN or infinity (e.g. taken over an empty dataset). "
                "Fix: compute them with head_means() on a non-empty dataset."
            )

    @classmethod
    def upgrade(cls, version: int, fields: dict[str, Any]) -> dict[str, Any]:
        """Version 1 did not record the model: such means load without identity (their shape is still checked)."""
        return {"model": None, **fields}

    def check_model(self, model: Any) -> None:
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
    _check_dataset(dataset, (column,), "head_means")
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


def ablated_model(model: Any, heads: Sequence[tuple[int, int]], means: HeadMeans, scope: str = "all") -> PrefixRunner:
    """A callable tokens → logits with ``heads`` mean-ablated (for :func:`score_pairs`).

    Args:
        model: the hooked model.
        heads: ``[(layer, head), ...]`` to ablate.
        means: the replacement values.
        scope: ``"all"`` positions or only the ``"last"``.

    Returns:
        A :class:`~mathcircuits.models.prefix.PrefixRunner`: the shared prefix runs once per batch, ablated
        like every other position (scope ``"all"``) or clean (scope ``"last"``).
    """
    if scope not in ("all", "last"):
        raise ValueError(f"scope {scope!r} is unknown. Fix: use 'all' or 'last'.")
    hooks = _hooks(model, heads, means, scope)
    return PrefixRunner(model.bridge, fwd_hooks=hooks, prefix_hooks=hooks if scope == "all" else None)


def _check_dataset(dataset: Any, needed: Sequence[str], caller: str) -> None:
    """Refuse an empty dataset, or one without the columns ``caller`` reads, naming the dataset as the culprit."""
    have = list(getattr(dataset, "column_names", None) or [])
    missing = [c for c in needed if c not in have]
    if missing:
        raise ValueError(
            f"{caller} got a dataset without the columns {missing} (it has {have}). "
            "Fix: pass pairs built by mathcircuits.data.generate_pairs."
        )
    if len(dataset) == 0:
        raise ValueError(
            f"{caller} got an empty dataset (0 pairs), so there is nothing to average or score. "
            "Fix: pass a dataset with pairs (e.g. the correct pairs of the identify stage); check filters upstream."
        )


def _as_heads(model: Any, heads: Any) -> list[tuple[int, int]]:
    """Heads as ``[(layer, head)]``; a KeyComponents (anything with ``heads`` and ``check_model``) is checked."""
    if hasattr(heads, "heads") and hasattr(heads, "check_model"):
        heads.check_model(model.spec)
        heads = heads.heads
    return [(int(layer), int(head)) for layer, head in heads]


def ablated_accuracy(
    model: Any, dataset: Any, heads: Any, means: HeadMeans, scope: str = "all", batch_size: int = 32
) -> float:
    """Share of pairs answered correctly with ``heads`` mean-ablated.

    Args:
        model: the hooked model.
        dataset: pairs with ``tokens``, ``answer_tokens`` and ``n_tokens`` (non-empty).
        heads: a :class:`~mathcircuits.patching.KeyComponents` of this model, or ``[(layer, head), ...]``.
        means: :class:`HeadMeans` taken on this model.
        scope: ``"all"`` positions or only the ``"last"``.
        batch_size: pairs per forward.

    Returns:
        The accuracy in [0, 1]. Heads or means of another model raise an error naming both models.
    """
    heads = _as_heads(model, heads)
    means.check_model(model.spec)
    _check_dataset(dataset, ("tokens", "answer_tokens", "n_tokens"), "ablated_accuracy")
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

    STAGE = "validate"

    def to_dataframe(self):
        """One row per k: ranked accuracy with its Wilson 95% interval over the ``n_pairs`` pairs
        (ranked_low, ranked_high), the random orders' mean, std and range (random_min, random_max), and drops."""

        rnd = self.random_accuracy
        wilson = [wilson_interval(round(a * self.n_pairs), self.n_pairs) for a in self.ranked_accuracy]
        return pd.DataFrame(
            {
                "k": self.ks,
                "ranked_accuracy": self.ranked_accuracy,
                "ranked_low": [w.low for w in wilson],
                "ranked_high": [w.high for w in wilson],
                "random_mean": rnd.mean(0).tolist(),
                "random_std": (rnd.std(0) if rnd.shape[0] > 1 else torch.zeros(rnd.shape[1])).tolist(),
                "random_min": rnd.min(0).values.tolist(),
                "random_max": rnd.max(0).values.tolist(),
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
    """Knock out 0..max_k heads in effect-rank order and in ``n_random`` random orders.

    Args:
        model: the hooked model.
        dataset: the pairs to score (non-empty, with ``tokens``, ``answer_tokens``, ``n_tokens``, ``cf_tokens``).
        patching: a :class:`~mathcircuits.patching.PatchingResult` of this model (finite head effects).
        max_k: knock out up to this many heads.
        n_random: number of random orders.
        seed: seed of the random orders.
        means: :class:`HeadMeans` of this model (default: taken on ``dataset``'s counterfactual prompts).
        scope: ``"all"`` positions or only the ``"last"``.
        progress: show a progress bar.

    Returns:
        The :class:`KnockoutResult`.
    """

    spec = model.spec
    patching.check_model(spec)
    patching.check_finite()
    _check_dataset(dataset, ("tokens", "answer_tokens", "n_tokens"), "knockout_curve")
    means = means or head_means(model, dataset)
    means.check_model(spec)
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
        ks=ks,
        ranked_accuracy=ranked_acc,
        random_accuracy=rand,
        baseline_accuracy=base,
        operation="+".join(ops),
        ranked_heads=ranked,
        n_pairs=len(dataset),
        scope=scope,
        seeds=[seed],
    )
