"""Cross-validated linear probes of number states: ``n mod T`` (Cohen's κ) and circular digit probes.

Fu et al. (2026) show that Fourier spikes appear everywhere, and that what separates models is whether
``n mod T`` can be *read* linearly (κ ≈ 0.96 at ``T = 2`` for a Transformer, chance for an LSTM). Levy & Geva
(2025) find digits encoded circularly: a probe onto ``(cos 2πd/10, sin 2πd/10)`` decodes each digit well.

Probes. Ridge regression (``RidgeCV``, its penalty chosen per target by efficient leave-one-out over a log grid)
from the standardised state to every target at once: the one-hot class of ``n mod T`` (prediction: the largest
output) and ``(cos, sin)`` of the units and tens digits (prediction: the angle). Cross-validation holds out
**whole contexts** (``GroupKFold``); every number occurs in training in other contexts.

Scores. ``mod T``: Cohen's κ of the out-of-fold predictions, ``κ = (p_o − p_e) / (1 − p_e)`` (0 = chance).
Digits: the mean circular error in digits, ``min(|Δθ|, 2π − |Δθ|) · 10 / 2π`` (chance: 2.5). Intervals:
percentile bootstrap over the probed items.

Baselines. For a digit-split tokenizer depth 0 is the tokenizer baseline: the last token *is* the units digit, so
``mod 2, 5, 10`` are perfect there (for single-token numbers depth 0 is the learned embedding, part of what is
measured, not a baseline). The **control task** (Hewitt & Liang 2019) fits the same probe to a random
relabelling of the numbers (``π(n) mod T``, the digits of ``π(n)``): what a probe reads from number *identity*
alone. A probe on random directions of the residual would be the same probe (a rotation changes nothing), so the
control task is the "random directions" baseline here.

References: Fu et al. (2026); Levy & Geva, "Language models encode numbers using digit
representations in base 10" (NAACL 2025); Hewitt & Liang, "Designing and interpreting probes
with control tasks" (EMNLP 2019); Cohen, Educational and Psychological Measurement 20 (1960).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from sklearn.linear_model import RidgeCV
from sklearn.model_selection import GroupKFold
from sklearn.preprocessing import StandardScaler
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits.numbers.reading import Tokenization, token_fixed_periods
from mathcircuits.numbers.results import quantile
from mathcircuits.numbers.states import NumberStates
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.bootstrap import bootstrap_indices
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, DEFAULT_N_BOOT, DEFAULT_UNCERTAINTY

__all__ = [
    "BestDepth",
    "ProbeResult",
    "mod_probes",
]

ALPHAS = tuple(10.0**e for e in range(-2, 6))
DIGITS = ("units", "tens")


def _weights(n: int, n_boot: int, seed: int) -> Tensor:
    idx = bootstrap_indices(n, n_boot, seed)
    return torch.zeros(n_boot, n, dtype=torch.float64).scatter_add_(1, idx, torch.ones(idx.shape, dtype=torch.float64))


def cohen_kappa(
    y: Sequence[int] | Tensor, pred: Sequence[int] | Tensor, n_classes: int, weights: Tensor | None = None
) -> Tensor:
    """Cohen's κ of ``pred`` against ``y``; with ``weights`` [boot, item] (bootstrap counts) one κ per resample.

    NaN when the true classes are all one class.
    """
    y, pred = torch.as_tensor(y).long(), torch.as_tensor(pred).long()
    w = torch.ones(1, len(y), dtype=torch.float64) if weights is None else weights
    total = w.sum(1)
    agree = (w @ (y == pred).double()) / total
    fy = (w @ torch.nn.functional.one_hot(y, n_classes).double()) / total[:, None]
    fp = (w @ torch.nn.functional.one_hot(pred, n_classes).double()) / total[:, None]
    pe = (fy * fp).sum(1)
    kappa = (agree - pe) / (1 - pe)
    kappa = torch.where(pe >= 1 - 1e-12, torch.full_like(kappa, float("nan")), kappa)
    return kappa[0] if weights is None else kappa


def _circular_error(angle: np.ndarray, digit: np.ndarray) -> np.ndarray:
    true = 2 * math.pi * digit / 10
    diff = np.abs((angle - true + math.pi) % (2 * math.pi) - math.pi)
    return diff * 10 / (2 * math.pi)


class BestDepth(TypedDict):
    """A probe target at its best depth (:meth:`ProbeResult.best`)."""

    depth: str
    score: Interval
    depth0: Interval
    control: Interval


@dataclass(frozen=True, repr=False)
class ProbeResult(SavedResult):
    """Probe scores per target and depth, with intervals and the control task (see the module docstring).

    ``targets`` are ``"mod T"``, ``"units digit"``, ``"tens digit"``; ``metrics`` ``"kappa"`` (higher is better) or
    ``"circular error"`` (digits, lower is better); ``chance`` 0 for κ, 2.5 for circular error. ``score`` and
    ``control`` are ``[target, depth]``. ``n_items`` is contexts x numbers; ``token_periods`` the probed periods the
    read token fixes by itself (:func:`~mathcircuits.numbers.reading.token_fixed_periods`).
    """

    targets: tuple[str, ...]
    metrics: tuple[str, ...]
    chance: tuple[float, ...]
    depths: tuple[str, ...]
    score: Float[Tensor, "target depth"]
    low: Float[Tensor, "target depth"]
    high: Float[Tensor, "target depth"]
    control: Float[Tensor, "target depth"]
    control_low: Float[Tensor, "target depth"]
    control_high: Float[Tensor, "target depth"]
    n_items: int
    n_contexts: int
    folds: int
    tokenization: Tokenization
    reading: str
    seed: int = 0
    n_boot: int = DEFAULT_N_BOOT
    confidence: float = DEFAULT_CONFIDENCE
    token_periods: tuple[int, ...] = ()

    STAGE = "numbers"
    VERSION = 3

    def _t(self, target: str) -> int:
        if target not in self.targets:
            raise KeyError(f"no target {target!r}; this result has {list(self.targets)}.")
        return self.targets.index(target)

    def interval(self, target: str, depth: int, control: bool = False) -> Interval:
        """The score of ``target`` at ``depth`` (an index) with its interval; ``control=True`` for the control task."""
        t = self._t(target)
        v, lo, hi = (
            (self.control, self.control_low, self.control_high) if control else (self.score, self.low, self.high)
        )
        return Interval(
            float(v[t, depth]),
            float(lo[t, depth]),
            float(hi[t, depth]),
            self.n_items,
            self.confidence,
            "bootstrap",
            self.seed,
        )

    def best_depth(self, target: str) -> int:
        """The depth with the best score of ``target`` (highest κ, lowest circular error), depth 0 excluded."""
        t = self._t(target)
        s = self.score[t, 1:] if self.metrics[t] == "kappa" else -self.score[t, 1:]
        return int(torch.nan_to_num(s, nan=-math.inf).argmax()) + 1

    def best(self, target: str) -> BestDepth:
        """At the best depth: the score, the depth-0 baseline and the control task, each an :class:`Interval`."""
        d = self.best_depth(target)
        return {
            "depth": self.depths[d],
            "score": self.interval(target, d),
            "depth0": self.interval(target, 0),
            "control": self.interval(target, d, control=True),
        }

    def baselines(self, target: str, depth: int) -> list[Interval]:
        """The control task at ``depth``, and depth 0 for a digit-split tokenizer (not for single-token numbers)."""
        out = [self.interval(target, depth, control=True)]
        return out + ([self.interval(target, 0)] if self.tokenization == "multi-token" else [])

    def beats_baselines(self, target: str, depth: int) -> bool | None:
        """True: the interval clears every baseline's; False: it lies on the wrong side of one; None: overlap."""
        higher = self.metrics[self._t(target)] == "kappa"
        s, base = self.interval(target, depth), self.baselines(target, depth)
        if higher:
            if all(s.low > b.high for b in base):
                return True
            if any(s.high <= b.low for b in base):
                return False
        else:
            if all(s.high < b.low for b in base):
                return True
            if any(s.low >= b.high for b in base):
                return False
        return None

    def headline(self) -> str:
        parts = []
        for t in self.targets:
            b = self.best(t)
            parts.append(f"{t} {b['score'].format('{:.2f}')} @ {b['depth']}")
        return "; ".join(parts)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (target, depth): metric, score with interval, control task with interval."""
        recs = []
        for t, name in enumerate(self.targets):
            for d, dep in enumerate(self.depths):
                recs.append(
                    {
                        "target": name,
                        "metric": self.metrics[t],
                        "depth": dep,
                        "score": float(self.score[t, d]),
                        "low": float(self.low[t, d]),
                        "high": float(self.high[t, d]),
                        "control": float(self.control[t, d]),
                        "control_low": float(self.control_low[t, d]),
                        "control_high": float(self.control_high[t, d]),
                        "chance": self.chance[t],
                    }
                )
        return pd.DataFrame(recs)


def _targets(
    numbers: np.ndarray, periods: Sequence[int]
) -> tuple[np.ndarray, list[tuple[str, int, slice, np.ndarray]]]:
    """The stacked regression targets of ``numbers`` and, per target, (kind, classes, columns, integer labels)."""
    blocks, spec, col = [], [], 0
    for t in periods:
        labels = numbers % t
        blocks.append(np.eye(t)[labels])
        spec.append(("mod", t, slice(col, col + t), labels))
        col += t
    for place in (1, 10):
        d = (numbers // place) % 10
        blocks.append(np.stack([np.cos(2 * np.pi * d / 10), np.sin(2 * np.pi * d / 10)], 1))
        spec.append(("digit", place, slice(col, col + 2), d))
        col += 2
    return np.concatenate(blocks, 1), spec


def mod_probes(
    states: NumberStates,
    periods: Sequence[int] = (2, 5, 10, 100),
    folds: int = 5,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    depths: Sequence[int] | None = None,
) -> ProbeResult:
    """Fit the mod-T and circular digit probes at every depth (or some), with the control task.

    ``states`` needs two contexts (folds hold out whole contexts; ``folds`` at most their number). ``depths`` are
    indices; depth 0, the baseline, is always included. ``uncertainty``'s seed also draws the control relabelling.
    """
    c, n, n_depths, _ = states.states.shape
    chosen = sorted({0, *(range(n_depths) if depths is None else depths)})
    if chosen[-1] >= n_depths or chosen[0] < 0:
        raise FixableValueError(
            f"depths {list(depths or [])} are outside 0…{n_depths - 1}. ", "pick depths of these states."
        )
    d = len(chosen)
    if c < 2:
        raise FixableValueError(
            "the probes hold out whole contexts, and these states have one. ",
            "record number_states with at least two contexts (number_contexts(..., n=8)).",
        )
    if any(int(t) < 2 for t in periods):
        raise FixableValueError(f"periods {tuple(periods)} must be >= 2. ", "use e.g. (2, 5, 10, 100).")
    folds = min(folds, c)
    n_boot, confidence, seed = uncertainty.n_boot, uncertainty.confidence, uncertainty.seed
    nums = np.tile(np.asarray(states.numbers), c)
    groups = np.repeat(np.arange(c), n)
    perm = np.random.default_rng(seed).permutation(np.asarray(states.numbers))
    relabel = dict(zip(states.numbers, perm.tolist()))
    y_real, spec = _targets(nums, periods)
    y_ctrl, spec_ctrl = _targets(np.asarray([relabel[v] for v in nums]), periods)
    y = np.concatenate([y_real, y_ctrl], 1)
    width = y_real.shape[1]
    splits = list(GroupKFold(n_splits=folds).split(np.zeros(len(nums)), groups=groups))
    weights = _weights(len(nums), n_boot, seed)
    a = 1 - confidence
    n_t = len(spec)
    out = {
        k: torch.full((n_t, d), float("nan"))
        for k in ("score", "low", "high", "control", "control_low", "control_high")
    }
    for depth, src in enumerate(chosen):
        x = states.states[:, :, src].reshape(c * n, -1).double().numpy()
        pred = np.zeros_like(y)
        for train, test in splits:
            scaler = StandardScaler().fit(x[train])
            model = RidgeCV(alphas=ALPHAS, alpha_per_target=True).fit(scaler.transform(x[train]), y[train])
            pred[test] = model.predict(scaler.transform(x[test]))
        for which, offset, targets in (("score", 0, spec), ("control", width, spec_ctrl)):
            for t, (kind, size, cols, labels) in enumerate(targets):
                p = pred[:, offset + cols.start : offset + cols.stop]
                if kind == "mod":
                    yt, yp = torch.as_tensor(labels), torch.as_tensor(p.argmax(1))
                    boots, value = cohen_kappa(yt, yp, size, weights), float(cohen_kappa(yt, yp, size))
                else:
                    err = torch.as_tensor(_circular_error(np.arctan2(p[:, 1], p[:, 0]), labels))
                    boots, value = (weights @ err) / weights.sum(1), float(err.mean())
                out[which][t, depth] = value
                out[f"{which}_low" if which == "control" else "low"][t, depth] = quantile(boots, a / 2)
                out[f"{which}_high" if which == "control" else "high"][t, depth] = quantile(boots, 1 - a / 2)
    names = [f"mod {size}" if kind == "mod" else f"{DIGITS[0 if size == 1 else 1]} digit" for kind, size, _, _ in spec]
    return ProbeResult(
        targets=tuple(names),
        metrics=tuple("kappa" if kind == "mod" else "circular error" for kind, *_ in spec),
        chance=tuple(0.0 if kind == "mod" else 2.5 for kind, *_ in spec),
        depths=tuple(states.depths[i] for i in chosen),
        **out,
        n_items=len(nums),
        n_contexts=c,
        folds=folds,
        tokenization=states.tokenization,
        reading=states.reading,
        seed=seed,
        n_boot=n_boot,
        confidence=confidence,
        token_periods=token_fixed_periods(states.tokenization, states.numbers, states.last_tokens, periods),
    )
