"""Transfer: do the key heads matter beyond the data they were found on? (Zhang et al. 2024, §3.4)

For each evaluation set (other operations and templates, multi-digit operands, real word problems) the
clean model is scored first, and **only the items it answers correctly** are kept (an ablation cannot
break an answer that was never right). On those, accuracy is measured with the key heads ablated and
with ``n_random`` depth-matched random sets of non-key heads
(:func:`~mathcircuits.ablation.control.depth_matched_draws`), which give the key set an empirical p-value.

A set is **measurable** when the clean model answers at least ``min_clean_accuracy`` (0.5) of its items
and at least ``min_correct`` (5). Below that the model is near chance (SmolLM2-135M: two-digit addition
0.06, word templates 0.19) and the row says *not measurable on this model*, never a transfer number.

Every accuracy carries a Wilson interval: clean over all items, key-ablated over the clean-correct
items, random-ablated pooled over the random sets, widened to include every single set's accuracy.

A set without aligned counterfactual prompts (no ``cf_tokens``: real word problems) cannot take a
per-position mean or a donor, so it gets the position-free ``"mean"`` of the identification data; each
row records its ablation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from tqdm.auto import tqdm

from mathcircuits._errors import FixableValueError
from mathcircuits._schema import configured, given
from mathcircuits.ablation.config import ValidationConfig
from mathcircuits.ablation.control import depth_matched_draws
from mathcircuits.ablation.hooks import Ablation, Scope, check_choice
from mathcircuits.ablation.means import HeadMeans, PositionPool
from mathcircuits.ablation.result import MEASURED, NOT_MEASURABLE, TransferResult, TransferRow
from mathcircuits.ablation.scorer import BATCH_SETS, KnockoutScorer
from mathcircuits.data.pairset import PairSet
from mathcircuits.models import HookedModel
from mathcircuits.models.heads import Head
from mathcircuits.patching import KeyComponents
from mathcircuits.patching.key_components import resolve_heads
from mathcircuits.stats import Interval
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, wilson_interval
from mathcircuits.stats.sequential import SequentialTest, besag_clifford, stop_after

__all__ = [
    "transfer",
]


def transfer_row(
    name: str,
    clean: Sequence[int],
    key: Sequence[int] | None,
    random_sets: Sequence[Sequence[int]],
    held_in: bool = False,
    min_clean_accuracy: float = 0.5,
    min_correct: int = 5,
    confidence: float = DEFAULT_CONFIDENCE,
    ablation: Ablation = "mean",
    planned_draws: int = 0,
    stop_after: int = 0,
) -> TransferRow:
    """One transfer row from per-item correctness (0/1), with Wilson intervals.

    ``key`` and ``random_sets`` are correctness on the clean-correct items only (``key`` None: not measured).
    ``held_in``: the set's data found the key heads. The drops are ablated accuracy − 1. ``planned_draws`` and
    ``stop_after``: the sequential test that drew ``random_sets`` (0: the fixed test over them); when it stopped
    early (``n_draws`` < ``planned_draws``, the result's ``n_random``) the p-value is Besag–Clifford's ``h / n_draws``.
    """
    nan = float("nan")
    n, k = len(clean), int(sum(clean))
    c = wilson_interval(k, n, confidence)
    measurable = n > 0 and c.value >= min_clean_accuracy and k >= min_correct and key is not None
    row = TransferRow(
        dataset=name,
        held_in=held_in,
        n=n,
        n_correct=k,
        clean=c,
        status=MEASURED if measurable else NOT_MEASURABLE,
        ablation=ablation,
    )
    if not measurable:
        return row
    kw = wilson_interval(int(sum(key)), len(key), confidence)
    per_set = [sum(r) / len(r) for r in random_sets]
    pooled = wilson_interval(sum(int(sum(r)) for r in random_sets), sum(len(r) for r in random_sets), confidence)
    r_mean = sum(per_set) / len(per_set) if per_set else nan
    r_std = (sum((x - r_mean) ** 2 for x in per_set) / len(per_set)) ** 0.5 if len(per_set) > 1 else 0.0
    key_acc = sum(key) / len(key)
    # the key set's empirical p-value: random sets that lose at least as much (accuracy at most the key set's);
    # the sequential test's (Besag–Clifford) when it stopped early
    exceeds = [a <= key_acc + 1e-12 for a in per_set]
    planned = max(planned_draws, len(per_set))
    p = besag_clifford(exceeds, planned, stop_after).p_value if planned else (1 + sum(exceeds)) / (1 + len(per_set))
    return dataclasses.replace(
        row,
        key=kw,
        random=Interval(
            r_mean,
            min([pooled.low, *per_set]) if per_set else nan,
            max([pooled.high, *per_set]) if per_set else nan,
            k,
            confidence,
            "wilson",
        ),
        random_ablated_std=r_std,
        key_drop=kw.value - 1.0,
        random_drop=r_mean - 1.0,
        p_value=p,
        n_draws=len(per_set),
    )


def _sequential_draws(
    scorer: KnockoutScorer,
    key_heads: list[Head],
    draws: list[list[Head]],
    kept: list[int],
    batch_sets: int,
    decided_at: float | None,
) -> tuple[list[int], list[list[int]]]:
    """Correctness on the ``kept`` items with the key set and with the random sets, ``batch_sets`` sets per forward,
    until the sequential test of "a random set's accuracy is at most the key set's" finishes (all draws when
    ``decided_at`` is None)."""
    (key_c, _), *first = scorer.score_many([key_heads, *draws[: max(0, batch_sets - 1)]], batch_sets)
    key = [int(key_c[i]) for i in kept]
    acc = sum(key) / len(key)
    rand = [[int(c[i]) for i in kept] for c, _ in first]
    n = len(draws)
    h = stop_after(n, decided_at) if decided_at is not None and n else 0
    step = max(1, batch_sets)

    def test() -> SequentialTest:
        return besag_clifford([sum(r) / len(r) <= acc + 1e-12 for r in rand], max(n, 1), h)

    while len(rand) < n and not test().finished:
        more = scorer.score_many(draws[len(rand) : len(rand) + step], batch_sets)
        rand += [[int(c[i]) for i in kept] for c, _ in more]
    return key, rand[: test().draws] if n else []


def transfer(
    model: HookedModel,
    eval_sets: Mapping[str, PairSet],
    key_heads: KeyComponents | Sequence[tuple[int, int]],
    means: HeadMeans | None,
    config: ValidationConfig | None = None,
    *,
    n_random: int | None = None,
    seed: int = 0,
    scope: Scope | None = None,
    progress: bool = False,
    held_in: Sequence[str] = (),
    min_clean_accuracy: float = 0.5,
    min_correct: int = 5,
    batch_size: int = 32,
    ablation: Ablation | None = None,
    pool: PositionPool | None = None,
    batch_sets: int = BATCH_SETS,
    decided_at: float | None = None,
) -> TransferResult:
    """Per dataset: clean accuracy, then key-ablated and random-ablated accuracy on the clean-correct items.

    ``eval_sets``: name → pairs (empty sets skipped). ``means``: for ``"mean"`` and sets without
    ``cf_tokens`` (None: no set may need them). ``config``: the settings (a run's ``validation`` section;
    None: the defaults of :class:`ValidationConfig`), of which it reads ``transfer_draws`` (depth-matched random
    sets per dataset, the p-value's null), ``scope`` and ``ablation``; ``n_random``, ``scope`` and ``ablation``
    replace them when given. ``held_in``: sets whose data found the key heads (marked; not evidence of transfer).
    ``pool``: for ``"position_mean"``, used for sets with ``template_id`` and ``pair_id``. Heads or means of
    another model raise an error naming both models. ``batch_sets``: head sets scored in one forward
    (:meth:`KnockoutScorer.logits_many`; 1: one forward per set, the reference). ``decided_at``: each set's
    sequential test stops drawing once its p-value is at least this whatever the remaining draws show
    (:func:`~mathcircuits.stats.sequential.stop_after`; None: all ``transfer_draws``); the row keeps the draws made.
    """

    cfg = configured(
        "transfer", ValidationConfig, config, **given(transfer_draws=n_random, scope=scope, ablation=ablation)
    )
    n_random, scope, ablation = cfg.transfer_draws, cfg.scope, cfg.ablation
    spec = model.spec
    check_choice(ablation, scope)
    key_heads = list(resolve_heads(key_heads, spec, allow_empty=True, arg="key_heads"))
    if means is not None:
        means.check_model(spec)
    rows = []
    for s, (name, ds) in enumerate(tqdm(eval_sets.items(), disable=not progress, desc="transfer")):
        if len(ds) == 0:
            continue
        ds.require(("tokens", "answer_tokens", "n_tokens"), "transfer")
        used = ablation if ablation == "mean" or ds.has("cf_tokens") else "mean"
        if used == "mean" and means is None:
            why = "ablation 'mean'" if ablation == "mean" else "it has no cf_tokens"
            raise FixableValueError(
                f"transfer set {name!r} needs the position-free mean ({why}) but means is None. ",
                "pass head_means(model, counterfactual pairs).",
            )
        pooled = pool if ds.has("template_id", "pair_id") else None  # else: group means
        scorer = KnockoutScorer(model, ds, used, means, scope, seed, batch_size, pool=pooled)
        clean = [int(c) for c in scorer.score([])[0]]
        kept = [i for i, c in enumerate(clean) if c]
        key = rand = None
        n_planned = h = 0
        if len(kept) >= min_correct and len(kept) / len(clean) >= min_clean_accuracy:
            draws = depth_matched_draws(key_heads, spec, n_random, seed + s) if key_heads else []
            key, rand = _sequential_draws(scorer, key_heads, draws, kept, batch_sets, decided_at)
            n_planned, h = len(draws), stop_after(len(draws), decided_at) if decided_at is not None and draws else 0
        rows.append(
            transfer_row(
                name,
                clean,
                key,
                rand or [],
                name in set(held_in),
                min_clean_accuracy,
                min_correct,
                DEFAULT_CONFIDENCE,
                used,
                n_planned,
                h,
            )
        )
    return TransferResult(
        rows=tuple(rows),
        key_heads=key_heads,
        n_random=n_random,
        scope=scope,
        min_clean_accuracy=min_clean_accuracy,
        min_correct=min_correct,
        seed=seed,
    )
