"""The random control of a knockout: the key set against many depth-matched random sets of non-key heads.

"Knocking out the key heads collapses accuracy" means little unless as many *other* heads do not: heads
at the same depth may hurt as much because they sit where the answer is computed. The paper draws a few
random heads anywhere (key heads included); this null is stricter: each random set has
the key set's **layer multiset**, from the **non-key** heads; the draws are distinct (every such set when
there are at most ``n_draws``, 100: the null is then exact); all are scored on the key set's pairs with
its ablation. The key drop gets a **percentile** and an **empirical p-value**,
``p = (1 + #{draws whose drop ≥ the key drop}) / (1 + n)`` (Davison & Hinkley 1997, §4.2: the +1 makes
p a valid test level). Every draw resumes at the key set's lowest layer from the clean run.

Usage::

    ctl = random_control(model, fresh_pairs, key.heads, n_draws=100, ablation="position_mean")
    ctl.key_drop, ctl.p_value, ctl.percentile
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits._schema import configured, given
from mathcircuits.ablation.config import ValidationConfig
from mathcircuits.ablation.hooks import Ablation, Scope
from mathcircuits.ablation.means import HeadMeans, PositionPool
from mathcircuits.ablation.mediation import FreezeTap, MLPMediation, mlp_mediation
from mathcircuits.ablation.mlp_margin import MarginTap, MLPMargin, margin_with_tap, mlp_margin
from mathcircuits.ablation.scorer import BATCH_SETS, KnockoutScorer
from mathcircuits.data import Operation
from mathcircuits.data.pairset import PairSet
from mathcircuits.models import HookedModel
from mathcircuits.models.heads import Head
from mathcircuits.models.spec import ModelSpec
from mathcircuits.patching import KeyComponents
from mathcircuits.patching.key_components import resolve_heads
from mathcircuits.stats.sequential import SequentialTest, besag_clifford, stop_after

__all__ = [
    "RandomControl",
    "control_and_margin",
    "control_margin_mediation",
    "random_control",
]


def _pools(key_heads: Sequence[tuple[int, int]], spec: ModelSpec) -> tuple[Counter, dict[int, list[int]]]:
    keys = {(int(l), int(h)) for l, h in key_heads}
    if not keys:
        raise FixableValueError(
            "the random control needs at least one key head. ", "select key heads first (identify)."
        )
    per_layer = Counter(l for l, _ in keys)
    pools = {l: [h for h in range(spec.n_heads) if (l, h) not in keys] for l in per_layer}
    short = {l: (k, len(pools[l])) for l, k in per_layer.items() if len(pools[l]) < k}
    if short:
        l, (k, n) = next(iter(short.items()))
        raise FixableValueError(
            f"layer {l} has {k} key heads but only {n} other heads, so no depth-matched random set exists. ",
            "use fewer key heads per layer, or a model with more heads.",
        )
    return per_layer, pools


def n_depth_matched_sets(key_heads: Sequence[tuple[int, int]], spec: ModelSpec) -> int:
    """How many distinct depth-matched sets of non-key heads exist: ``∏_l C(n_heads − k_l, k_l)``."""
    per_layer, pools = _pools(key_heads, spec)
    return math.prod(math.comb(len(pools[l]), k) for l, k in per_layer.items())


def depth_matched_draws(
    key_heads: Sequence[tuple[int, int]], spec: ModelSpec, n_draws: int, seed: int = 0
) -> list[list[Head]]:
    """Distinct random head sets with the key set's layer multiset, from the non-key heads: every one of them
    when there are at most ``n_draws`` (the null is then exact), else ``n_draws`` drawn without replacement.

    Each set is sorted. ValueError for an empty key set, or a layer with fewer non-key than key heads.
    """
    per_layer, pools = _pools(key_heads, spec)
    layers = sorted(per_layer.items())
    if n_depth_matched_sets(key_heads, spec) <= n_draws:
        choices = [[[Head(l, h) for h in c] for c in itertools.combinations(pools[l], k)] for l, k in layers]
        return [sorted(h for part in combo for h in part) for combo in itertools.product(*choices)]
    rng = random.Random(seed)
    seen: dict[tuple[Head, ...], None] = {}
    while len(seen) < n_draws:  # more sets exist than the budget, so this ends
        seen.setdefault(tuple(sorted(Head(l, h) for l, k in layers for h in rng.sample(pools[l], k))), None)
    return [list(d) for d in seen]


@dataclass(frozen=True, repr=False)
class RandomControl(SavedResult):
    """The key set's knockout beside ``n_draws`` depth-matched random sets of non-key heads, per pair.

    ``*_correct``: 1.0 where a pair's whole answer is still greedy-correct (teacher-forced).
    ``identification_overlap``: scored pairs that also chose the key heads (must be 0; -1 unknown).
    ``n_possible``: distinct depth-matched sets that exist (-1 unknown).
    """

    key_heads: list[Head]
    draws: list[list[Head]]
    clean_correct: Float[Tensor, " pair"]
    key_correct: Float[Tensor, " pair"]
    random_correct: Float[Tensor, "draw pair"]
    operations: list[str]
    template_ids: list[str]
    pair_ids: list[int]
    ablation: Ablation = "position_mean"
    scope: Scope = "all"
    seed: int = 0
    label: str = ""
    identification_overlap: int = -1
    notes: dict[str, str] = field(default_factory=dict)
    n_possible: int = -1
    planned_draws: int = -1  # draws planned; more than len(draws) when the sequential test stopped early
    stop_after: int = 0  # the sequential test's h (0: the fixed-n test)

    STAGE = "validate"
    VERSION = 3

    @property
    def sequential(self) -> SequentialTest:
        """The pooled comparison as a sequential Monte Carlo test (Besag–Clifford; the fixed test when ``h`` is 0
        or it ran to its planned draws): its p-value and floor."""
        d = self.random_drops()
        exceeds = (d >= self.key_drop() - 1e-12).tolist()
        return besag_clifford(exceeds, max(self.planned_draws, len(self.draws)), self.stop_after)

    @property
    def exhaustive(self) -> bool:
        """Whether the draws are every depth-matched set there is (the null is exact, not sampled)."""
        return 0 < self.n_possible <= len({tuple(map(tuple, d)) for d in self.draws})

    def __post_init__(self) -> None:
        n = len(self.pair_ids)
        shapes = (self.clean_correct.shape, self.key_correct.shape, self.random_correct.shape)
        if shapes[0] != (n,) or shapes[1] != (n,) or tuple(shapes[2]) != (len(self.draws), n):
            raise ValueError(
                f"RandomControl shapes disagree: clean {tuple(shapes[0])}, key {tuple(shapes[1])}, random "
                f"{tuple(shapes[2])} for {n} pairs and {len(self.draws)} draws."
            )

    # --- the numbers the claims read ----------------------------------------------------------------------
    def rows(self, operation: Operation | None = None) -> Tensor:
        """Indices of the pairs of ``operation`` (all pairs when None)."""
        return torch.tensor(
            [i for i, o in enumerate(self.operations) if operation is None or o == operation], device="cpu"
        )

    @property
    def n_pairs(self) -> int:
        return len(self.pair_ids)

    def baseline(self, operation: Operation | None = None) -> float:
        """Clean accuracy on the scored pairs."""
        return float(self.clean_correct[self.rows(operation)].mean())

    def key_drop(self, operation: Operation | None = None) -> float:
        """Accuracy lost with the key set knocked out (positive = a drop)."""
        r = self.rows(operation)
        return float(self.clean_correct[r].mean() - self.key_correct[r].mean())

    def random_drops(self, operation: Operation | None = None) -> Float[Tensor, " draw"]:
        """Accuracy lost with each random set knocked out."""
        r = self.rows(operation)
        return self.clean_correct[r].mean() - self.random_correct[:, r].mean(1)

    def p_value(self, operation: Operation | None = None) -> float:
        """Empirical p-value of "the key set drops accuracy no more than a depth-matched random set":
        ``(1 + #{random drop ≥ key drop}) / (1 + n_draws)``; over all pairs, the sequential test's
        (:attr:`sequential`: ``h / L`` when it stopped early). Per operation: the fixed formula on the draws made."""
        if operation is None:
            return self.sequential.p_value
        d = self.random_drops(operation)
        return float((1 + (d >= self.key_drop(operation) - 1e-12).sum()) / (1 + d.numel()))

    def percentile(self, operation: Operation | None = None) -> float:
        """Share of the random sets (0–100) whose drop is smaller than the key set's (ties count half)."""
        d, k = self.random_drops(operation), self.key_drop(operation)
        return float(100 * ((d < k - 1e-12).sum() + 0.5 * ((d - k).abs() <= 1e-12).sum()) / d.numel())

    def to_dataframe(self) -> pd.DataFrame:
        """One row per operation and one for all pairs: baseline, key drop, the null's mean / 95th percentile,
        the key set's percentile and p-value."""
        out = []
        for op in [None, *dict.fromkeys(self.operations)]:
            d = self.random_drops(op)
            out.append(
                {
                    "operation": op or "all",
                    "n_pairs": len(self.rows(op)),
                    "baseline": self.baseline(op),
                    "key_drop": self.key_drop(op),
                    "random_drop_mean": float(d.mean()),
                    "random_drop_q95": float(torch.quantile(d, 0.95)),
                    "percentile": self.percentile(op),
                    "p_value": self.p_value(op),
                }
            )
        return pd.DataFrame(out)

    def summary_items(self) -> list[tuple[str, str]]:
        """Key set, draws, pairs, the key drop and its place in the null."""
        return [
            ("key heads", str(len(self.key_heads))),
            ("draws", f"{len(self.draws)} depth-matched, non-key"),
            ("pairs", f"{self.n_pairs} (overlap with identification: {self.identification_overlap})"),
            (
                "key drop",
                f"{self.key_drop():+.0%} vs random {float(self.random_drops().mean()):+.0%} "
                f"(percentile {self.percentile():.0f}, p = {self.p_value():.3f})",
            ),
        ]


def random_control(
    model: HookedModel,
    pairs: PairSet,
    key_heads: KeyComponents | Sequence[tuple[int, int]],
    config: ValidationConfig | None = None,
    *,
    n_draws: int | None = None,
    seed: int = 0,
    ablation: Ablation | None = None,
    means: HeadMeans | None = None,
    scope: Scope | None = None,
    batch_size: int = 32,
    label: str = "",
    identification_overlap: int = -1,
    progress: bool = False,
    scorer: KnockoutScorer | None = None,
    pool: PositionPool | None = None,
    batch_sets: int = BATCH_SETS,
    decided_at: float | None = None,
) -> RandomControl:
    """Knock out the key set and ``n_draws`` depth-matched random sets of non-key heads on the same pairs.

    Score *fresh* pairs, not those that chose the heads. ``config``: the settings (a run's ``validation``
    section; None: the defaults of :class:`ValidationConfig`), of which it reads ``control_draws``,
    ``ablation`` and ``scope``; ``n_draws``, ``ablation`` and ``scope`` replace them when given. ``n_draws`` ≥ 1
    (the claims ask for 100); all sets when fewer exist. ``label`` and ``identification_overlap`` are saved
    with the result. ``scorer``: one already built on ``pairs`` (reuses its clean runs). ``pool``: for
    ``"position_mean"`` (a new scorer's). ``batch_sets``: random sets scored in one forward
    (:meth:`KnockoutScorer.logits_many`; 1: one forward per set, the reference). ``decided_at``: stop drawing
    once the pooled p-value is at least this whatever the remaining draws show (the sequential test,
    :func:`~mathcircuits.stats.sequential.stop_after`; None: all ``n_draws``); the draws made are the first ones.
    """
    pairs.require_model(model, "random_control")
    if n_draws is not None and n_draws < 1:
        raise FixableValueError(f"n_draws={n_draws}. ", "draw at least one random set (the claims ask for 100).")
    cfg = configured(
        "random_control", ValidationConfig, config, **given(control_draws=n_draws, ablation=ablation, scope=scope)
    )
    n_draws, ablation, scope = cfg.control_draws, cfg.ablation, cfg.scope
    pairs.require(("tokens", "answer_tokens", "n_tokens"), "random_control")
    if len(pairs) == 0:
        raise FixableValueError("random_control got no pairs. ", "pass the fresh pairs of at least one operation.")
    key = list(resolve_heads(key_heads, model.spec, arg="key_heads"))
    draws = depth_matched_draws(key, model.spec, n_draws, seed)
    scorer = scorer or KnockoutScorer(model, pairs, ablation, means, scope, seed, batch_size, pool=pool)
    scored = _draws(scorer, key, draws, decided_at, progress, batch_sets)
    return _control(model.spec, pairs, key, draws, scored, ablation, scope, seed, label, identification_overlap)


def _control(
    spec: ModelSpec,
    pairs: PairSet,
    key: list[Head],
    draws: list[list[Head]],
    scored: tuple[Tensor, Tensor, Tensor, int],
    ablation: Ablation,
    scope: Scope,
    seed: int,
    label: str,
    identification_overlap: int,
) -> RandomControl:
    """The result of :func:`_draws`' ``scored`` (clean, key and random correctness, the test's ``h``)."""
    clean, key_c, rand, h = scored
    return RandomControl(
        key_heads=key,
        draws=draws[: len(rand)],
        clean_correct=clean,
        key_correct=key_c,
        random_correct=rand,
        **pairs.labels(),
        ablation=ablation,
        scope=scope,
        seed=seed,
        label=label,
        identification_overlap=identification_overlap,
        n_possible=n_depth_matched_sets(key, spec),
        planned_draws=len(draws),
        stop_after=h,
    )


def _exceeds(clean: Tensor, key: Tensor, rand: Tensor) -> list[bool]:
    """Per random set (rows of ``rand``): its mean drop over the pairs is at least the key set's."""
    return ((clean.mean() - rand.mean(1)) >= float(clean.mean() - key.mean()) - 1e-12).tolist()


def _draws(
    scorer: KnockoutScorer,
    key: list[Head],
    draws: list[list[Head]],
    decided_at: float | None,
    progress: bool,
    batch_sets: int,
    tap: MarginTap | None = None,
    until: Callable[[int], bool] | None = None,
) -> tuple[Tensor, Tensor, Tensor, int]:
    """Clean, key and random correctness (the random rows: the draws the sequential test made), and its ``h``.

    Scores ``batch_sets`` draws at a time and stops once the test has finished and ``until()`` (another test
    riding on the same forwards) is true.
    """
    correct = lambda heads: torch.tensor(scorer.score(heads)[0], dtype=torch.float32, device="cpu")  # noqa: E731
    clean, key_c = correct([]), correct(key)
    n = len(draws)
    h = stop_after(n, decided_at) if decided_at is not None else 0
    rand = torch.zeros(n, len(clean), device="cpu")
    step, made = max(1, batch_sets), 0
    bar = tqdm(total=n, disable=not progress, desc="random control")
    for i in range(0, n, step):
        at = tap.starting_at(i) if tap is not None else None
        for j, (whole, _) in enumerate(scorer.score_many(draws[i : i + step], batch_sets, tap=at), start=i):
            rand[j] = torch.tensor(whole, dtype=torch.float32, device="cpu")
        made = min(n, i + step)
        bar.update(made - i)
        test = besag_clifford(_exceeds(clean, key_c, rand[:made]), n, h)
        if test.finished and (until is None or until(made)):
            break
    bar.close()
    used = besag_clifford(_exceeds(clean, key_c, rand[:made]), n, h).draws
    return clean, key_c, rand[:used], h


def control_and_margin(
    model: HookedModel,
    pairs: PairSet,
    key_heads: Sequence[tuple[int, int]],
    layers: Sequence[int],
    config: ValidationConfig,
    scorer: KnockoutScorer,
    *,
    seed: int = 0,
    label: str = "",
    identification_overlap: int = -1,
    progress: bool = False,
    decided_at: float | None = None,
    batch_sets: int = BATCH_SETS,
) -> tuple[RandomControl, MLPMargin]:
    """Claim C2's random control and claim C4's MLP margin from one knocked-out run per random set.

    Both knock the same depth-matched sets out of the same pairs: C2 reads each run's answers, C4 the later MLPs'
    margin at the last prompt position (:class:`~mathcircuits.ablation.mlp_margin.MarginTap`, read along the
    same batched forward). Equal, to float rounding, to :func:`random_control` and then :func:`mlp_margin` on the
    first ``config.margin_draws`` of its sets. ``decided_at``: each comparison's sequential test
    (:func:`random_control`); the forwards continue while either still needs draws. A scorer that cannot batch
    (fast paths off, or a bridge that cannot resume mid-network) runs the two one after the other.
    """
    pairs.require_model(model, "control_and_margin")
    run = (model, pairs, key_heads, layers, config, scorer, seed, label, identification_overlap, progress)
    control, margin, _ = _shared_runs(*run, decided_at, batch_sets, mediation=False)
    return control, margin


def control_margin_mediation(
    model: HookedModel,
    pairs: PairSet,
    key_heads: Sequence[tuple[int, int]],
    layers: Sequence[int],
    config: ValidationConfig,
    scorer: KnockoutScorer,
    *,
    seed: int = 0,
    label: str = "",
    identification_overlap: int = -1,
    progress: bool = False,
    decided_at: float | None = None,
    batch_sets: int = BATCH_SETS,
) -> tuple[RandomControl, MLPMargin, MLPMediation]:
    """:func:`control_and_margin`, and claim C4's mediation of the key set and of the control's first
    ``config.margin_draws`` random sets (:func:`~mathcircuits.ablation.mlp_mediation`) from the same runs.

    The mediation's knocked-out runs with the MLPs free are C2's (their final answer margin is read along the
    batched forwards); only the runs with the MLPs frozen at their clean outputs are new, one per set, batched and
    resumed at each set's lowest layer (:class:`~mathcircuits.ablation.mediation.FreezeTap`). Equal, to float
    rounding, to :func:`mlp_mediation` on ``control.draws[: config.margin_draws]``, which runs where the scorer
    cannot batch, or with the position-free mean at every position (its prefix is ablated, so not frozen).
    """
    pairs.require_model(model, "control_margin_mediation")
    run = (model, pairs, key_heads, layers, config, scorer, seed, label, identification_overlap, progress)
    control, margin, med = _shared_runs(*run, decided_at, batch_sets, mediation=True)
    assert med is not None
    return control, margin, med


def _shared_runs(
    model: HookedModel,
    pairs: PairSet,
    key_heads: Sequence[tuple[int, int]],
    layers: Sequence[int],
    config: ValidationConfig,
    scorer: KnockoutScorer,
    seed: int,
    label: str,
    identification_overlap: int,
    progress: bool,
    decided_at: float | None,
    batch_sets: int,
    mediation: bool,
) -> tuple[RandomControl, MLPMargin, MLPMediation | None]:
    key = list(resolve_heads(key_heads, model.spec, arg="key_heads"))
    ctl_kw = dict(seed=seed, label=label, identification_overlap=identification_overlap, progress=progress)
    med_kw = dict(
        ablation=config.ablation, means=scorer.means, scope=config.scope, scorer=scorer, batch_sets=batch_sets
    )
    if not scorer.can_batch(batch_sets):
        control = random_control(model, pairs, key, config, scorer=scorer, decided_at=decided_at, batch_sets=batch_sets,
                                 **ctl_kw)  # fmt: skip
        sets = control.draws[: config.margin_draws]
        margin = mlp_margin(model, pairs, key, layers, random_sets=sets, **med_kw)
        med = mlp_mediation(model, pairs, key, layers, random_sets=sets, **med_kw) if mediation else None
        return control, _sequential_margin(margin, len(sets), decided_at), med
    draws = depth_matched_draws(key, model.spec, config.control_draws, seed)
    freeze = mediation and not (scorer.ablation == "mean" and scorer.scope == "all")
    base, tap = margin_with_tap(model, scorer, key, layers, len(draws), batch_sets=batch_sets, keep_clean_mlp=freeze)
    n_m = min(config.margin_draws, len(draws))
    h_m = stop_after(n_m, decided_at) if decided_at is not None else 0
    key_m = float((base.margins[0] - base.margins[1]).mean())

    def margin_test(made: int) -> SequentialTest:
        drops = (base.margins[0][None] - tap.margins[: min(made, n_m)]).mean(1)
        return besag_clifford((drops >= key_m - 1e-12).tolist(), n_m, h_m)

    scored = _draws(scorer, key, draws, decided_at, progress, batch_sets, tap,
                    until=lambda made: margin_test(made).finished)  # fmt: skip
    control = _control(model.spec, pairs, key, draws, scored, config.ablation, config.scope, seed, label,
                       identification_overlap)  # fmt: skip
    m = margin_test(len(draws)).draws  # the margin's own test: the sets it drew (all made forwards read them)
    assert all(tap.measured(s) for s in range(m)), "the margin test stopped later than the forwards"
    margin = MLPMargin(
        key_heads=key,
        layers=tap.reader.layers,
        clean_margin=base.margins[0],
        ablated_margin=base.margins[1],
        operations=control.operations,
        template_ids=control.template_ids,
        pair_ids=control.pair_ids,
        ablation=config.ablation,
        scope=config.scope,
        random_heads=draws[:m],
        random_ablated=tap.margins[:m].clone() if m else None,
        planned_draws=n_m,
        stop_after=h_m,
    )
    if not mediation:
        return control, margin, None
    sets = control.draws[: config.margin_draws]
    if not freeze:
        return control, margin, mlp_mediation(model, pairs, key, layers, random_sets=sets, **med_kw)
    assert all(tap.measured(s) for s in range(len(sets))), "C2 stopped later than its forwards"
    frozen = FreezeTap(tap.reader, base.clean_mlp, 1 + len(sets))
    scorer.logits_many([key, *sets], batch_sets, tap=frozen)
    med = MLPMediation(
        key_heads=key,
        layers=tap.reader.layers,
        clean_margin=base.answer[0],
        ablated_margin=torch.cat([base.answer[1:2], tap.answer[: len(sets)]]),
        frozen_margin=frozen.frozen,
        operations=control.operations,
        template_ids=control.template_ids,
        pair_ids=control.pair_ids,
        ablation=config.ablation,
        scope=config.scope,
        random_heads=[list(d) for d in sets],
    )
    return control, margin, med


def _sequential_margin(margin: MLPMargin, n_sets: int, decided_at: float | None) -> MLPMargin:
    """``margin`` with the sequential test's record (its sets all drawn: the fixed test's p)."""
    h = stop_after(n_sets, decided_at) if decided_at is not None and n_sets else 0
    return dataclasses.replace(margin, planned_draws=n_sets, stop_after=h)
