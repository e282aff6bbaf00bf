"""Knockout: are the key heads necessary? (Zhang et al. 2024, §3.3)

A knocked-out head's ``hook_z`` (per query head, before ``W_O``) is replaced by a value that keeps its
typical output but removes what it computes about *this* prompt's arithmetic (``ablation``):

* ``"mean"``: its mean over all counterfactual prompts and positions (the paper's mean ablation).
* ``"position_mean"``: at each position, its mean over counterfactual prompts of the same template and
  length (Wang et al. 2022, IOI), over a large ``pool`` leaving the pair's own counterfactual out, else
  over the template's scored pairs. The shared prefix keeps its clean activation.
* ``"resample"``: the output on one seeded counterfactual donor of the same template and length (Chan et
  al. 2022). Again a no-op on the prefix.

Counterfactual sequences carry the same teacher-forced answer tokens, so positions stay aligned.
Accuracy is :func:`mathcircuits.data.score_pairs`' full-answer criterion. The curve removes heads in
effect-rank order and in random orders over all heads (the paper's Figure 3). Scored on the pairs that
chose the heads, the drop is biased upward: it warns (:func:`~mathcircuits.data.fresh_pairs`).
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Sequence

import torch

from mathcircuits._errors import FixableTypeError, FixableValueError
from mathcircuits._progress import progress_bar
from mathcircuits._schema import configured, given
from mathcircuits.ablation.config import ValidationConfig
from mathcircuits.ablation.hooks import Ablation, Scope, check_choice
from mathcircuits.ablation.means import HeadMeans, PositionPool, head_means
from mathcircuits.ablation.result import KnockoutResult
from mathcircuits.ablation.scorer import KnockoutScorer
from mathcircuits.data.pairset import PairSet, pair_keys
from mathcircuits.models import Head, HookedModel
from mathcircuits.models.spec import ModelSpec
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.patching.key_components import resolve_heads

__all__ = ["ablated_accuracy", "knockout_curve"]


def ablated_accuracy(
    model: HookedModel,
    pairs: PairSet,
    heads: KeyComponents | Sequence[tuple[int, int]],
    means: HeadMeans | None = None,
    scope: Scope = "all",
    batch_size: int = 32,
    ablation: Ablation = "mean",
    seed: int = 0,
) -> float:
    """Share of pairs answered correctly with ``heads`` knocked out.

    ``pairs`` needs ``tokens``, ``answer_tokens``, ``n_tokens`` (and ``cf_tokens`` unless ``ablation="mean"``).
    ``means``: for ``"mean"`` only (default: taken on ``pairs``). ``seed`` draws the resampling donors.
    Heads or means of another model raise an error naming both models.
    """
    pairs.require_model(model, "ablated_accuracy")
    heads = list(resolve_heads(heads, model.spec, allow_empty=True))
    if means is not None:
        means.check_model(model.spec)
    pairs.require(("tokens", "answer_tokens", "n_tokens"), "ablated_accuracy")
    scorer = KnockoutScorer(model, pairs, ablation, means, scope, seed, batch_size, reuse_clean=False)
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


def _chosen_on(key: KeyComponents, pairs: PairSet) -> int:
    """How many of ``pairs`` chose the selection (0 when it kept no fingerprints)."""
    mine = set(key.source.pair_keys)
    return sum(k in mine for k in pair_keys(pairs)) if mine else 0


def knockout_curve(
    model: HookedModel,
    pairs: PairSet,
    patching: PatchingResult | KeyComponents,
    config: ValidationConfig | None = None,
    *,
    max_k: int | None = None,
    n_random: int | None = None,
    seed: int = 0,
    means: HeadMeans | None = None,
    scope: Scope | None = None,
    progress: bool | None = None,
    ablation: Ablation | None = None,
    ks: Sequence[int] | None = None,
    pool: PositionPool | None = None,
    scorer: KnockoutScorer | None = None,
) -> KnockoutResult:
    """Knock out the top-k heads in effect-rank order and ``n_random`` random orders, for each k.

    ``patching``: a :class:`~mathcircuits.patching.PatchingResult` (heads ranked by effect; finite effects)
    or a :class:`~mathcircuits.patching.KeyComponents` (its heads, in its order); computed on some of
    the pairs of ``pairs``, it warns. ``config``: the settings (a run's ``validation`` section; None: the
    defaults of :class:`ValidationConfig`), of which it reads ``knockout_max_k``, ``n_random``, ``scope`` and
    ``ablation``; ``max_k``, ``n_random``, ``scope`` and ``ablation`` replace them when given. ``max_k`` is
    capped by a selection's size. ``seed`` draws the random orders and donors. ``ks``: default every k in
    1…max_k (0, the clean model, is always included). ``pool``: for ``"position_mean"``, counterfactual prompts
    to average over, leaving each scored pair's own out; None: the scored pairs of each template. ``scorer``: one
    already built on ``pairs`` (reuses its clean runs and replacement values; its ablation, scope and donors are
    used, so build it with this call's).
    ``progress``: a bar on stderr (None: on unless ``MATHCIRCUITS_PROGRESS=0``).
    """
    cfg = configured(
        "knockout_curve", ValidationConfig, config,
        **given(knockout_max_k=max_k, n_random=n_random, scope=scope, ablation=ablation),
    )  # fmt: skip
    max_k, n_random, scope, ablation = cfg.knockout_max_k, cfg.n_random, cfg.scope, cfg.ablation
    spec = model.spec
    ranked = _ranked_heads(patching, spec, max_k)
    check_choice(ablation, scope)
    pairs.require(("tokens", "answer_tokens", "n_tokens"), "knockout_curve")
    pairs.require_model(model, "knockout_curve")
    shared = patching.shared_pairs(pairs) if isinstance(patching, PatchingResult) else _chosen_on(patching, pairs)
    if shared:
        warnings.warn(
            f"knockout_curve scores {shared} of {len(pairs)} pairs that the path patching which ranks the heads "
            "was computed on: heads chosen because they matter on these pairs look more necessary on them than "
            "they are (selection bias). Fix: score fresh pairs, e.g. mc.fresh_pairs(model, pairs, n=32).",
            UserWarning,
            stacklevel=2,
        )
    if ablation == "mean":
        means = means or head_means(model, pairs)
        means.check_model(spec)
    wanted = range(1, len(ranked) + 1) if ks is None else ks
    bad = [k for k in wanted if not 1 <= int(k) <= len(ranked)]
    if bad:
        raise FixableValueError(f"ks {bad} are outside 1…{len(ranked)} (the ranked heads). ", "choose k in that range.")
    ks = [0, *sorted({int(k) for k in wanted})]
    all_heads = [Head(l, h) for l in range(spec.n_layers) for h in range(spec.n_heads)]
    rng = random.Random(seed)
    orders = [rng.sample(all_heads, len(ranked)) for _ in range(n_random)]
    if scorer is not None and (scorer.ablation, scorer.scope, len(scorer.seqs)) != (ablation, scope, len(pairs)):
        raise FixableValueError(
            f"knockout_curve got a scorer of ablation {scorer.ablation!r}, scope {scorer.scope!r} on "
            f"{len(scorer.seqs)} pairs for ablation {ablation!r}, scope {scope!r} on {len(pairs)} pairs. ",
            "build the scorer on the curve's pairs with its ablation and scope, or pass none.",
        )
    scorer = scorer or KnockoutScorer(model, pairs, ablation, means, scope, seed, pool=pool)
    bar = progress_bar(
        progress,
        f"knocking out up to {len(ranked)} heads (ranked, then {n_random} random orders)",
        total=len(ks) * (1 + n_random),
    )
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
    ops = sorted(set(pairs.operations)) if pairs.has("operation") else ["?"]
    return KnockoutResult(
        ks=ks,
        ranked_accuracy=ranked_acc,
        random_accuracy=rand,
        baseline_accuracy=base,
        operation="+".join(ops),
        ranked_heads=ranked,
        n_pairs=len(pairs),
        scope=scope,
        seeds=[seed],
        ablation=ablation,
    )
