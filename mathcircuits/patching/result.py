"""The value path patching returns: per-head and per-MLP effects, each with an interval, and the total effect.

Pairs of one template share their prefix and wording, so they are not independent: with each pair's
template known and ≥ :data:`~mathcircuits.stats.bootstrap.MIN_CLUSTERS` (5) templates per operation, the interval
is a **cluster bootstrap over templates, stratified by operation**; otherwise a bootstrap over pairs.
Intervals need the per-pair effects (the identify stage keeps them). The total effect
(``per_pair_total``) is each counterfactual prompt scored against its clean prompt.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor, nn

from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits.data.pairset import PairSet, pair_keys
from mathcircuits.models import HookedModel
from mathcircuits.models.heads import Head
from mathcircuits.models.spec import ModelSpec, check_model
from mathcircuits.patching.scan import SenderKind
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.bootstrap import (
    MIN_CLUSTERS,
    bootstrap_mean,
    bootstrap_statistic,
    cluster_bootstrap,
    cluster_bootstrap_mean,
)
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, DEFAULT_N_BOOT

__all__ = ["PatchSettings", "PatchingResult"]


@dataclass(frozen=True)
class PatchSettings:
    """How a patching result was computed (besides its metric and method): senders, batch, chunk size."""

    senders: tuple[SenderKind, ...] = ("heads", "mlps")
    batch_size: int = 16
    chunk_rows: int = 8192


@dataclass(frozen=True, repr=False)
class PatchingResult(SavedResult):
    """Effects of patching each sender (head or MLP) to the logits, averaged over pairs.

    NaN marks senders that were not patched. The bounds (``head_low`` ...) are filled from the per-pair
    effects when not given. ``n_excluded`` counts pairs the metric refused (NaN everywhere);
    ``pair_templates``/``pair_operations`` are the intervals' clusters and strata; ``pair_keys`` are
    fingerprints (:func:`~mathcircuits.data.pairset.pair_keys`), so a later stage can tell it is handed the pairs
    that chose the heads (:meth:`shared_pairs`).
    """

    STAGE = "identify"
    VERSION = 5

    head_effects: Float[Tensor, "layer head"]
    mlp_effects: Float[Tensor, " layer"]
    metric: str
    method: str
    model: ModelSpec
    n_pairs: int
    pair_ids: list[int] = field(default_factory=list)
    operations: list[str] = field(default_factory=list)
    clean_logit_mean: float = float("nan")
    per_pair_heads: Float[Tensor, "pair layer head"] | None = None
    per_pair_mlps: Float[Tensor, "pair layer"] | None = None
    seconds: float = float("nan")
    settings: PatchSettings | None = None
    head_low: Float[Tensor, "layer head"] | None = None
    head_high: Float[Tensor, "layer head"] | None = None
    mlp_low: Float[Tensor, " layer"] | None = None
    mlp_high: Float[Tensor, " layer"] | None = None
    confidence: float = DEFAULT_CONFIDENCE
    ci_n_boot: int = DEFAULT_N_BOOT
    ci_seed: int = 0
    per_pair_total: Float[Tensor, " pair"] | None = None
    n_excluded: int = 0
    pair_templates: list[str] = field(default_factory=list)
    pair_operations: list[str] = field(default_factory=list)
    ci_method: str = ""
    pair_keys: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.ci_method:
            object.__setattr__(self, "ci_method", "cluster_bootstrap" if self._clustered() else "bootstrap")
        if self.head_low is None and self.per_pair_heads is not None and self.per_pair_heads.shape[0] > 0:
            lo, hi = self._interval(self.per_pair_heads)
            object.__setattr__(self, "head_low", lo)
            object.__setattr__(self, "head_high", hi)
        if self.mlp_low is None and self.per_pair_mlps is not None and self.per_pair_mlps.shape[0] > 0:
            lo, hi = self._interval(self.per_pair_mlps)
            object.__setattr__(self, "mlp_low", lo)
            object.__setattr__(self, "mlp_high", hi)
        shape = (self.model.n_layers, self.model.n_heads)
        if tuple(self.head_effects.shape) != shape or tuple(self.mlp_effects.shape) != shape[:1]:
            raise FixableValueError(
                f"PatchingResult effects have shapes {tuple(self.head_effects.shape)} and "
                f"{tuple(self.mlp_effects.shape)}, but {self.model.describe()} needs {shape} and {shape[:1]}. ",
                "build the result from path_patch() on that model.",
            )

    def _clustered(self) -> bool:
        """Whether the cluster bootstrap applies (the rule of :func:`~mathcircuits.stats.bootstrap.mean_interval`)."""
        n = self.per_pair_heads.shape[0] if self.per_pair_heads is not None else self.n_pairs
        if len(self.pair_templates) != n or n == 0:
            return False
        strata = self.pair_operations if len(self.pair_operations) == n else ["all"] * n
        per_op: dict[str, set[str]] = {}
        for t, op in zip(self.pair_templates, strata):
            per_op.setdefault(op, set()).add(t)
        return all(len(ts) >= MIN_CLUSTERS for ts in per_op.values())

    @property
    def uncertainty(self) -> Uncertainty:
        """The bootstrap of its intervals: ``ci_n_boot`` resamples, seed ``ci_seed``, level ``confidence``."""
        return Uncertainty(self.ci_n_boot, self.confidence, self.ci_seed)

    def _strata(self) -> list[str] | None:
        n = len(self.pair_templates)
        return self.pair_operations if len(self.pair_operations) == n else None

    def _interval(self, per_pair: Tensor, divide_by: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The interval of the per-pair values' means, by ``ci_method``."""
        if self.ci_method == "cluster_bootstrap":
            return cluster_bootstrap_mean(per_pair, self.pair_templates, self._strata(), self.uncertainty, divide_by)
        if divide_by is not None:
            raise FixableValueError("a ratio interval needs the pairs' templates. ", "patch pairs with a template_id.")
        return bootstrap_mean(per_pair, self.uncertainty)

    def total_interval(self) -> Interval:
        """The mean total effect (counterfactual vs clean prompt) over the scored pairs, with its interval."""
        nan = float("nan")
        if self.per_pair_total is None:
            return Interval(nan, nan, nan, 0, self.confidence, "none")
        t = self.per_pair_total.double()
        ok = ~torch.isnan(t)
        if not bool(ok.any()):
            return Interval(nan, nan, nan, 0, self.confidence, "none")
        if self.ci_method == "cluster_bootstrap":
            keep = ok.nonzero().flatten().tolist()
            strata = self._strata()
            try:
                return cluster_bootstrap(
                    t[ok],
                    [self.pair_templates[i] for i in keep],
                    None,
                    None if strata is None else [strata[i] for i in keep],
                    self.uncertainty,
                )
            except ValueError:  # the excluded pairs left an operation with one template
                pass
        return bootstrap_statistic(t[ok], None, self.uncertainty)

    def head_shares(self) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Each head's mean effect as a share of the mean total effect, ``effect / |total|``, with its interval.

        −0.05: patching the head alone moves the metric by 5% of what the whole counterfactual prompt does
        (the paper's −5% rule in units free of the metric). Returns ``(share, low, high)``, ``[layer, head]``
        each; the bounds are ``None`` without per-pair effects and templates (the ratio's interval resamples
        templates). ValueError when no total was recorded or it is zero.
        """
        total = self.total_interval().value
        if not total == total or abs(total) < 1e-12:
            raise FixableValueError(
                f"this patching result has no usable total effect (mean {total}), so head effects cannot be read as "
                "shares of it. ",
                "re-run path patching (it records the total effect), or use a counterfactual that changes the answer.",
            )
        share = self.head_effects / abs(total)
        if self.per_pair_heads is None or self.per_pair_total is None or self.ci_method != "cluster_bootstrap":
            return share, None, None
        lo, hi = self._interval(self.per_pair_heads, divide_by=self.per_pair_total)
        return share, lo, hi

    @classmethod
    def merge(cls, parts: Sequence[PatchingResult], pair_ids: Sequence[int] | None = None) -> PatchingResult:
        """One result over the pairs of several (e.g. one per operation): what one run over all of them gives.

        With every part's per-pair effects, they are concatenated and averaged again (bit for bit the mean of
        one run over the same pairs) and the intervals are recomputed; otherwise the means are weighted by
        each part's pair count, and the merged result has no per-pair effects or intervals. ``seconds`` is
        summed, settings are the first part's, ``clean_logit_mean`` is NaN (the parts were scored apart).
        Parts must share model, metric and method.
        """
        if not parts:
            raise FixableValueError("PatchingResult.merge got no results. ", "pass at least one PatchingResult.")
        first = parts[0]
        odd = [p for p in parts if (p.model, p.metric, p.method) != (first.model, first.metric, first.method)]
        if odd:
            raise FixableValueError(
                f"PatchingResult.merge got results of different models, metrics or methods "
                f"({first.model.name}/{first.metric}/{first.method} vs {odd[0].model.name}/{odd[0].metric}/"
                f"{odd[0].method}). ",
                "merge results of one model, metric and method.",
            )
        ids = list(pair_ids) if pair_ids is not None else [i for p in parts for i in p.pair_ids]
        ops = [op for p in parts for op in p.operations]
        common = dict(metric=first.metric, method=first.method, model=first.model, pair_ids=ids, operations=ops)
        common |= dict(clean_logit_mean=float("nan"), seconds=sum(p.seconds for p in parts), settings=first.settings)
        common |= dict(n_excluded=sum(p.n_excluded for p in parts))
        if all(len(p.pair_templates) == p.n_pairs for p in parts):
            common |= dict(pair_templates=[t for p in parts for t in p.pair_templates])
        if all(len(p.pair_operations) == p.n_pairs for p in parts):
            common |= dict(pair_operations=[o for p in parts for o in p.pair_operations])
        if all(len(p.pair_keys) == p.n_pairs for p in parts):
            common |= dict(pair_keys=[k for p in parts for k in p.pair_keys])
        if all(p.per_pair_total is not None for p in parts):
            common |= dict(per_pair_total=torch.cat([p.per_pair_total for p in parts]))
        if all(p.per_pair_heads is not None and p.per_pair_mlps is not None for p in parts):
            heads = torch.cat([p.per_pair_heads for p in parts])
            mlps = torch.cat([p.per_pair_mlps for p in parts])
            return cls(
                head_effects=heads.nanmean(0),
                mlp_effects=mlps.nanmean(0),
                n_pairs=heads.shape[0],
                per_pair_heads=heads,
                per_pair_mlps=mlps,
                **common,
            )
        weights = torch.tensor([float(p.n_pairs) for p in parts], device="cpu")
        w = weights / weights.sum()
        return cls(
            head_effects=(torch.stack([p.head_effects.float() for p in parts]) * w[:, None, None]).sum(0),
            mlp_effects=(torch.stack([p.mlp_effects.float() for p in parts]) * w[:, None]).sum(0),
            n_pairs=int(weights.sum()),
            **common,
        )

    def check_model(self, model: ModelSpec | HookedModel | nn.Module) -> None:
        """Refuse (:class:`~mathcircuits.models.ModelMismatchError`) a model other than the one of these effects."""
        check_model(self.model, model, "this patching result", "path-patch this model first (mathcircuits identify)")

    def shared_pairs(self, pairs: PairSet) -> int:
        """How many of ``pairs`` are pairs these effects were computed on (0 when the result kept no fingerprints)."""
        mine = set(self.pair_keys)
        return sum(k in mine for k in pair_keys(pairs)) if mine else 0

    def check_finite(self) -> None:
        """Refuse effects that cannot be ranked honestly.

        NaN marks senders that were not patched, so MLPs may be all NaN (the heads may not: every selection
        needs them). An infinity anywhere, or a NaN among finite effects of the same kind (e.g. a zero clean
        logit under ``relative_logit``), raises ``ValueError`` naming the senders.
        """
        n_heads = self.model.n_heads
        for kind, eff in (("head", self.head_effects), ("MLP", self.mlp_effects)):
            flat = eff.flatten()
            nan, inf = torch.isnan(flat), torch.isinf(flat)
            all_nan = bool(nan.all())
            if kind == "MLP" and all_nan:
                continue
            bad = inf | (nan if not all_nan or kind == "head" else torch.zeros_like(nan))
            if not bool(bad.any()):
                continue
            idx = bad.nonzero().flatten().tolist()
            names = [str(Head(i // n_heads, i % n_heads)) if kind == "head" else f"MLP{i}" for i in idx]
            shown = ", ".join(f"{n}={float(flat[i])}" for n, i in zip(names[:8], idx[:8]))
            more = f" and {len(idx) - 8} more" if len(idx) > 8 else ""
            if kind == "head" and all_nan:
                problem = "has no head effects (all NaN: the heads were not patched)"
                fix = "path-patch with senders=('heads', 'mlps') or ('heads',)"
            else:
                problem = f"has non-finite {kind} effects ({shown}{more}); ranking would drop or misplace them"
                fix = (
                    "re-run path patching; under metric='relative_logit' a zero clean logit gives inf/NaN, "
                    "so try metric='logit_diff'"
                )
            raise FixableValueError(f"the patching result on {self.model.describe()} {problem}. ", f"{fix}.")

    def to_dataframe(self):
        """One row per sender: kind (head|mlp), layer, head (``<NA>`` for MLPs), effect, its interval
        (effect_low, effect_high), rank (most negative first), and ``share``: the effect as a share of the total
        effect, ``effect / |total|`` (NaN without a usable total).

        Without per-pair effects (``keep_per_pair=False``, the default) there are no interval columns
        rather than columns of NaN, with a one-time warning saying the fix.
        """

        nan = float("nan")
        intervals = self.head_low is not None or self.mlp_low is not None
        if not intervals:
            warnings.warn(
                "this PatchingResult kept no per-pair effects, so its DataFrame has no interval columns "
                "(effect_low, effect_high). Fix: path_patch(..., keep_per_pair=True) (the identify stage does).",
                UserWarning,
                stacklevel=2,
            )

        def bound(t: Tensor | None, *idx: int) -> float:
            return nan if t is None else float(t[idx])

        rows = []
        n_layers, n_heads = self.head_effects.shape
        for layer in range(n_layers):
            for head in range(n_heads):
                rows.append(
                    {
                        "kind": "head",
                        "layer": layer,
                        "head": head,
                        "component": str(Head(layer, head)),
                        "effect": float(self.head_effects[layer, head]),
                        "effect_low": bound(self.head_low, layer, head),
                        "effect_high": bound(self.head_high, layer, head),
                    }
                )
            rows.append(
                {
                    "kind": "mlp",
                    "layer": layer,
                    "head": None,
                    "component": f"MLP{layer}",
                    "effect": float(self.mlp_effects[layer]),
                    "effect_low": bound(self.mlp_low, layer),
                    "effect_high": bound(self.mlp_high, layer),
                }
            )
        df = pd.DataFrame(rows)
        df["head"] = df["head"].astype("Int64")  # an MLP has no head: <NA>, not a fake -1
        if not intervals:
            df = df.drop(columns=["effect_low", "effect_high"])
        df["rank"] = df.groupby("kind")["effect"].rank(method="first").astype("Int64")
        total = self.total_interval().value
        df["share"] = df["effect"] / abs(total) if total == total and abs(total) > 1e-12 else nan
        return df

    def top_heads(self, k: int = 10) -> list[tuple[int, int, float]]:
        """The k heads with the most negative effect: ``(layer, head, effect)``, fewer when fewer are finite."""
        flat = self.head_effects.flatten().nan_to_num(nan=float("inf"))
        k = min(k, int(torch.isfinite(flat).sum()))
        idx = torch.argsort(flat)[:k]
        n_heads = self.head_effects.shape[1]
        return [(int(i) // n_heads, int(i) % n_heads, float(flat[i])) for i in idx]

    def summary_items(self) -> list[tuple[str, str]]:
        """Model, metric, method, pairs, operations and the three strongest heads (for ``repr``)."""
        top = ", ".join(f"{Head(l, h)} {e:+.3g}" for l, h, e in self.top_heads(3)) or "none patched"
        ops = ", ".join(dict.fromkeys(self.operations)) or "?"
        total = self.total_interval()
        return [
            ("model", self.model.name),
            ("metric", self.metric),
            ("method", self.method),
            (
                "pairs",
                str(self.n_pairs) + (f" ({self.n_excluded} excluded by the metric's guard)" if self.n_excluded else ""),
            ),
            ("total effect", total.format("{:+.3g}") + (f" ({total.method})" if total.n else "")),
            ("operations", ops),
            ("top heads", top),
        ]
