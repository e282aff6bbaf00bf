"""Knockout: are the key heads necessary? (Zhang et al. 2024, §3.3)

A knocked-out head's output ``hook_z`` (per query head, before ``W_O``) is
replaced by a value that keeps the head's typical output but removes what it
computes about *this* prompt's arithmetic. Three replacements (``ablation``):

* ``"mean"`` — the head's mean over all counterfactual prompts of the dataset
  and over all their positions (:func:`~mathcircuits.ablation.head_means`), one
  vector per head at every position: the paper's mean ablation.
* ``"position_mean"`` — at each position, the head's mean over the counterfactual
  prompts of the same template and length (aligned positions; Wang et al. 2022,
  IOI): over a large ``pool`` of them when given, leaving the scored pair's own
  counterfactual out (the validate stage passes every generated pair), else over
  the scored pairs of the template. On the shared few-shot prefix every counterfactual prompt carries the
  same tokens as the prompt, so the mean there *is* the clean activation and the
  ablation changes only the query positions.
* ``"resample"`` — each prompt takes the head's output from one counterfactual
  prompt of the same template and length (a seeded random donor), at every
  position (resample ablation; Chan et al. 2022). Again a no-op on the prefix.

The counterfactual sequence of a pair is its ``cf_tokens`` followed by the same
teacher-forced answer tokens as the prompt, so positions stay aligned when the
answer has several tokens. ``scope="last"`` replaces only the last position.

Accuracy is the full-answer criterion of :func:`mathcircuits.data.score_pairs`
(every answer token greedy, teacher-forced); the first-token criterion is kept
beside it.

The scoring under each knockout, with its exact savings (clean prefix and clean blocks
below the lowest ablated layer reused), is :class:`~mathcircuits.ablation.KnockoutScorer`
(:mod:`.scorer`); the hooks are in :mod:`.hooks`, the result in :mod:`.result`.

The knockout curve removes heads in effect-rank order (most negative path-patching
effect first; or a :class:`~mathcircuits.patching.KeyComponents`'s heads in its order) and, for comparison,
in random orders over all heads (several seeds; mean and spread), as in the paper's Figure 3. Scored on the
pairs that chose the heads, the drop is biased upward (the heads were picked because they matter on *those*
pairs): it warns, and :func:`~mathcircuits.data.fresh_pairs` draws others.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

from mathcircuits._errors import FixableTypeError, FixableValueError
from mathcircuits.ablation.config import ValidationConfig
from mathcircuits.ablation.hooks import Ablation, Scope, check_choice
from mathcircuits.ablation.means import HeadMeans, PositionPool, head_means
from mathcircuits.ablation.result import KnockoutResult
from mathcircuits.ablation.scorer import KnockoutScorer
from mathcircuits.data.pairset import PairSet
from mathcircuits.models import Head, HookedModel
from mathcircuits.models.spec import ModelSpec
from mathcircuits.patching import KeyComponents, PatchingResult, resolve_heads

#: the library's defaults are the config's (the ``validation`` section of a run), defined once there
_DEFAULT = ValidationConfig()

__all__ = ["ablated_accuracy", "knockout_curve"]


def ablated_accuracy(
    model: HookedModel,
    dataset: PairSet,
    heads: KeyComponents | Sequence[tuple[int, int]],
    means: HeadMeans | None = None,
    scope: Scope = "all",
    batch_size: int = 32,
    ablation: Ablation = "mean",
    seed: int = 0,
) -> float:
    """Share of pairs answered correctly with ``heads`` knocked out.

    Args:
        model: the hooked model.
        dataset: pairs with ``tokens``, ``answer_tokens`` and ``n_tokens`` (non-empty; ``cf_tokens`` too
            unless ``ablation="mean"``).
        heads: a :class:`~mathcircuits.patching.KeyComponents` of this model, or ``[(layer, head), ...]``.
        means: :class:`HeadMeans` taken on this model (``"mean"`` only; default: taken on ``dataset``).
        scope: ``"all"`` positions or only the ``"last"``.
        batch_size: pairs per forward.
        ablation: ``"mean"``, ``"position_mean"`` or ``"resample"`` (module docstring).
        seed: seed of the resampling donors.

    Returns:
        The accuracy in [0, 1]. Heads or means of another model raise an error naming both models.
    """
    heads = list(resolve_heads(heads, model.spec, allow_empty=True))
    if means is not None:
        means.check_model(model.spec)
    dataset.require(("tokens", "answer_tokens", "n_tokens"), "ablated_accuracy")
    scorer = KnockoutScorer(model, dataset, ablation, means, scope, seed, batch_size, reuse_clean=False)
    return scorer.accuracy(heads)


def _ranked_heads(patching: object, spec: ModelSpec, max_k: int) -> list[Head]:
    """The heads in knockout order: a result's by effect (most negative first), a selection's in its order."""
    if isinstance(patching, KeyComponents):
        return list(resolve_heads(patching, spec, arg="knockout_curve(patching=)")[:max_k])
    if isinstance(patching, PatchingResult):
        patching.check_model(spec)
        patching.check_finite()
        return [Head(l, h) for l, h, _ in patching.top_heads(max_k)]
    raise FixableTypeError(
        f"knockout_curve(patching=) got a {type(patching).__name__}, but it ranks the heads to knock out from a "
        "PatchingResult (path_patch) or a KeyComponents (select_key_components). ",
        "pass one of those as the third argument, knockout_curve(model, pairs, result).",
    )


def knockout_curve(
    model: HookedModel,
    dataset: PairSet,
    patching: PatchingResult | KeyComponents,
    max_k: int = _DEFAULT.knockout_max_k,
    n_random: int = _DEFAULT.n_random,
    seed: int = 0,
    means: HeadMeans | None = None,
    scope: Scope = _DEFAULT.scope,
    progress: bool = False,
    ablation: Ablation = _DEFAULT.ablation,
    ks: Sequence[int] | None = None,
    pool: PositionPool | None = None,
) -> KnockoutResult:
    """Knock out the top-k heads in effect-rank order and ``n_random`` random orders, for each k.

    Args:
        model: the hooked model.
        dataset: the pairs to score (non-empty, with ``tokens``, ``answer_tokens``, ``n_tokens``, ``cf_tokens``).
        patching: a :class:`~mathcircuits.patching.PatchingResult` of this model (finite head effects; heads
            ranked by effect), or a :class:`~mathcircuits.patching.KeyComponents` (its heads, in its order).
            A result computed on (some of) ``dataset``'s pairs warns: score fresh pairs
            (:func:`~mathcircuits.data.fresh_pairs`).
        max_k: knock out up to this many heads (at most the selection's heads).
        n_random: number of random orders.
        seed: seed of the random orders (and of the resampling donors).
        means: :class:`HeadMeans` of this model for ``"mean"`` (default: taken on ``dataset``'s counterfactuals).
        scope: ``"all"`` positions or only the ``"last"``.
        progress: show a progress bar.
        ablation: ``"mean"``, ``"position_mean"`` or ``"resample"`` (module docstring); the default is the
            config's (``validation.ablation``).
        ks: the k values of the curve (default every k in 1…max_k; 0, the clean model, is always included).
        pool: for ``"position_mean"``: counterfactual prompts to average over, leaving each scored pair's own out
            (:class:`KnockoutScorer`); None: the scored pairs of each template.

    Returns:
        The :class:`KnockoutResult`.
    """

    spec = model.spec
    ranked = _ranked_heads(patching, spec, max_k)
    check_choice(ablation, scope)
    dataset.require(("tokens", "answer_tokens", "n_tokens"), "knockout_curve")
    shared = patching.shared_pairs(dataset) if isinstance(patching, PatchingResult) else 0
    if shared:
        warnings.warn(
            f"knockout_curve scores {shared} of {len(dataset)} pairs that the path patching which ranks the heads "
            "was computed on: heads chosen because they matter on these pairs look more necessary on them than "
            "they are (selection bias). Fix: score fresh pairs, e.g. mc.fresh_pairs(model, pairs, n=32).",
            UserWarning,
            stacklevel=2,
        )
    if ablation == "mean":
        means = means or head_means(model, dataset)
        means.check_model(spec)
    wanted = range(1, len(ranked) + 1) if ks is None else ks
    bad = [k for k in wanted if not 1 <= int(k) <= len(ranked)]
    if bad:
        raise FixableValueError(f"ks {bad} are outside 1…{len(ranked)} (the ranked heads). ", "choose k in that range.")
    ks = [0, *sorted({int(k) for k in wanted})]
    all_heads = [Head(l, h) for l in range(spec.n_layers) for h in range(spec.n_heads)]
    rng = random.Random(seed)
    orders = [rng.sample(all_heads, len(ranked)) for _ in range(n_random)]
    scorer = KnockoutScorer(model, dataset, ablation, means, scope, seed, pool=pool)
    bar = tqdm(total=len(ks) * (1 + n_random), disable=not progress, desc="knockout")
    base = scorer.accuracy([])
    ranked_acc = []
    for k in ks:
        ranked_acc.append(base if k == 0 else scorer.accuracy(ranked[:k]))
        bar.update()
    rand = torch.zeros(n_random, len(ks), device="cpu")
    for s, order in enumerate(orders):
        for j, k in enumerate(ks):
            rand[s, j] = base if k == 0 else scorer.accuracy(order[:k])
            bar.update()
    bar.close()
    ops = sorted(set(dataset.operations)) if dataset.has("operation") else ["?"]
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
        ablation=ablation,
    )
