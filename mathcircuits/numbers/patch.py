"""The causal test of the helix: patch only a subspace of a number's state (a → a′), against PCA and random subspaces.

A good fit is not a mechanism. Kantamneni & Tegmark (2025) replace the representation of ``a`` by that of ``a′``
and watch the answer move from ``a + b`` to ``a′ + b``. Here the replacement is restricted to a subspace with
orthonormal basis ``Q`` at depth ``d`` and at ``a``'s last token, ``x ← x_a + Q Qᵀ (x_a′ − x_a)``, for the helix
subspace, the top-``k`` PCA subspace and random ``k``-dim subspaces, beside the **full component**
(``Q Qᵀ = I``).

Measure. ``LD = logit(first token of a′ + b) − logit(first token of a + b)`` at the last position; a patch's
*shift* is ``LD_patched − LD_clean`` (logits; positive: toward ``a′ + b``). Pairs are prompts the model answers
correctly whose two answers start with different tokens (``a′`` has as many tokens as ``a``). Each mean shift,
and its fraction of the full patch's, gets a percentile-bootstrap interval over pairs (same resamples).

Caution (Makelov, Lange & Nanda 2023). A subspace patch can activate a direction dormant in the clean model, an
"interpretability illusion": a subspace that moves the answer *more* than the whole residual does is a warning
sign, not a discovery.

References: Kantamneni & Tegmark (2025), §4.3; Makelov, Lange & Nanda, "Is This the Subspace You Are Looking
For?" (ICLR 2024).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits._schema import configured, given
from mathcircuits.data import PairSet
from mathcircuits.data.swaps import swap_pairs
from mathcircuits.data.templates import TemplateSet
from mathcircuits.models import HookedModel, SuffixRunner
from mathcircuits.numbers.config import NumbersConfig
from mathcircuits.numbers.helix import HelixResult, random_subspace
from mathcircuits.numbers.results import TooFewCorrect, quantile
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.bootstrap import bootstrap_indices
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, DEFAULT_N_BOOT

__all__ = [
    "HelixPatchResult",
    "helix_patch",
]

CONDITIONS = ("full", "helix", "pca", "random")


@dataclass(frozen=True, repr=False)
class HelixPatchResult(SavedResult):
    """Mean answer shifts of subspace patches per depth (see the module docstring).

    ``depths`` are residuals after ``d ≥ 1`` blocks; ``shift`` (random: over all draws and pairs) and ``fraction``
    (of the full patch's shift) are ``[depth, condition]`` with bootstrap intervals over pairs; ``random_draws`` is
    each random subspace's mean shift ``[depth, draw]``; ``helix_minus_pca`` ``[depth]`` is paired over pairs, its
    interval a paired bootstrap. ``pairs`` are ``(a, a′, b)``.
    """

    depths: tuple[int, ...]
    conditions: tuple[str, ...]
    shift: Float[Tensor, "depth condition"]
    low: Float[Tensor, "depth condition"]
    high: Float[Tensor, "depth condition"]
    fraction: Float[Tensor, "depth condition"]
    fraction_low: Float[Tensor, "depth condition"]
    fraction_high: Float[Tensor, "depth condition"]
    random_draws: Float[Tensor, "depth draw"]
    helix_minus_pca: Float[Tensor, " depth"]
    diff_low: Float[Tensor, " depth"]
    diff_high: Float[Tensor, " depth"]
    k: int
    pairs: tuple[tuple[int, int, int], ...]
    template: str
    reading: str
    seed: int = 0
    n_boot: int = DEFAULT_N_BOOT
    confidence: float = DEFAULT_CONFIDENCE

    STAGE = "numbers"

    def cell(self, depth: int, condition: str) -> tuple[float, float, float]:
        """``(mean shift, low, high)`` of one condition at a patched depth."""
        i, j = self.depths.index(depth), self.conditions.index(condition)
        return float(self.shift[i, j]), float(self.low[i, j]), float(self.high[i, j])

    def strongest_depth(self) -> int:
        """The patched depth where the full-component patch moves the answer most (chosen without the subspaces)."""
        return self.depths[int(self.shift[:, 0].argmax())]

    def headline(self) -> str:
        d = self.strongest_depth()
        parts = [f"{c} {self.cell(d, c)[0]:+.2f}" for c in self.conditions]
        return f"{len(self.pairs)} pairs, k={self.k}; depth {d}: " + ", ".join(parts) + " logits"

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (depth, condition): mean shift with interval, and its share of the full patch's."""
        recs = []
        for i, d in enumerate(self.depths):
            for j, c in enumerate(self.conditions):
                recs.append(
                    {
                        "depth": d,
                        "condition": c,
                        "shift": float(self.shift[i, j]),
                        "low": float(self.low[i, j]),
                        "high": float(self.high[i, j]),
                        "fraction_of_full": float(self.fraction[i, j]),
                        "fraction_low": float(self.fraction_low[i, j]),
                        "fraction_high": float(self.fraction_high[i, j]),
                    }
                )
        return pd.DataFrame(recs)


@torch.no_grad()
def helix_patch(
    model: HookedModel,
    helix: HelixResult,
    template_sets: Sequence[TemplateSet],
    template_id: str | None = None,
    depths: Sequence[int] | None = None,
    n_pairs: int | None = None,
    b_values: Sequence[int] | None = None,
    n_random: int | None = None,
    batch_size: int | None = None,
    uncertainty: Uncertainty | None = None,
    *,
    config: NumbersConfig | None = None,
) -> HelixPatchResult:
    """Patch a → a′ in the helix, PCA, random and full subspaces at ``a``'s last token; measure the answer's shift.

    ``template_id``'s context should be one of the helix's; ``depths`` lie in ``1 … L−1`` (None: the helix's best
    depth); ``n_pairs`` correct pairs are drawn from 8x as many candidates. ``uncertainty``'s seed also draws the
    candidate pairs and the random subspaces. ``config``: the settings (a run's ``numbers`` section; None: the
    defaults of :class:`NumbersConfig`), of which it reads ``template``, ``patch_pairs``, ``patch_b`` (the range
    of ``b_values``), ``n_random_subspaces``, ``batch_size``, ``n_boot`` and ``seed``
    (:meth:`NumbersConfig.uncertainty`); the arguments given replace them.
    """
    cfg = configured(
        "helix_patch", NumbersConfig, config,
        **given(template=template_id, patch_pairs=n_pairs, n_random_subspaces=n_random, batch_size=batch_size),
    )  # fmt: skip
    template_id, n_pairs, n_random, batch_size = cfg.template, cfg.patch_pairs, cfg.n_random_subspaces, cfg.batch_size
    b_values = range(cfg.patch_b[0], cfg.patch_b[1] + 1) if b_values is None else b_values
    uncertainty = cfg.uncertainty() if uncertainty is None else uncertainty
    n_layers = model.spec.n_layers
    depths = tuple(int(d) for d in (depths if depths is not None else (helix.best_depth,)))
    bad = [d for d in depths if not 1 <= d <= n_layers - 1]
    if bad or not depths:
        raise FixableValueError(
            f"depths {bad or depths} are outside 1…{n_layers - 1}. ", "patch after at least one block."
        )
    seed = uncertainty.seed
    cands = swap_pairs(model.tokenizer, template_sets, template_id, helix.numbers, b_values, 8 * n_pairs, seed)
    keep = _correct(model, cands, batch_size, n_pairs)
    if len(keep) < 2:
        raise TooFewCorrect(
            f"the model answers only {len(keep)} of {len(cands)} candidate prompts of {template_id!r} correctly, "
            "too few to patch",
            "use a template and operands the model solves (e.g. smaller b_values).",
        )
    gen = torch.Generator().manual_seed(seed)
    d_model = model.spec.d_model
    subspaces = {
        d: [
            None,
            helix.subspace(d),
            helix.pca_subspaces[d],
            *(random_subspace(d_model, helix.k, gen) for _ in range(n_random)),
        ]
        for d in depths
    }
    kept = cands.select(keep)
    shifts = subspace_shifts(model, kept, subspaces, batch_size)
    return _summarise(shifts, depths, helix.k, kept, template_id, helix.reading, n_random, uncertainty)


@torch.no_grad()
def subspace_shifts(
    model: HookedModel,
    pairs: PairSet,
    subspaces: dict[int, Sequence[Tensor | None]],
    batch_size: int = 16,
) -> Float[Tensor, "pair depth subspace"]:
    """The answer shift of patching a → a′ at ``a``'s last token inside each subspace, per pair and depth.

    ``subspaces`` maps a depth to orthonormal bases ``[d_model, k]`` (``None``: the full component). Returns
    ``logit(a′+b) − logit(a+b)``, patched minus clean, ``[pair, depth, subspace]``.
    """
    depths = list(subspaces)
    width = max(len(v) for v in subspaces.values())
    shifts = torch.full((len(pairs), len(depths), width), float("nan"), device="cpu")
    for chunk in _groups(pairs, range(len(pairs)), batch_size):
        at = pairs.pos_a[chunk[0]][-1]  # a's last token
        ref = SuffixRunner(model, _tokens(pairs.tokens, chunk, model), at)
        src = SuffixRunner(model, _tokens(pairs.cf_tokens, chunk, model), at, check=False)
        out = ref.logits.device  # where the answers are read out (the unembedding's device)
        ans = torch.tensor([pairs.answer_token[i] for i in chunk], device=out)
        ans2 = torch.tensor([pairs.cf_answer_tokens[i][0] for i in chunk], device=out)
        clean = _ld(ref.logits, ans, ans2)
        for di, d in enumerate(depths):
            x, delta = ref.resid_pre(d), src.resid_pre(d)[:, 0] - ref.resid_pre(d)[:, 0]
            for ci, q in enumerate(subspaces[d]):
                step = delta if q is None else (delta @ q.to(delta)) @ q.to(delta).T
                patched = x.clone()
                patched[:, 0] += step
                shifts[chunk, di, ci] = (_ld(ref.run(from_layer=d, resid=patched), ans, ans2) - clean).cpu()
    return shifts


def _groups(cands: PairSet, rows: Sequence[int], batch_size: int) -> list[list[int]]:
    """``rows`` in batches of equal prompt length and operand position (so a batch shares its positions)."""
    by: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i in rows:
        by[(len(cands.tokens[i]), cands.pos_a[i][-1])].append(i)
    return [g[j : j + batch_size] for g in by.values() for j in range(0, len(g), batch_size)]


def _correct(model: HookedModel, cands: PairSet, batch_size: int, wanted: int) -> list[int]:
    """The first ``wanted`` candidates, in draw order, that the model answers correctly (first answer token)."""
    good: list[int] = []
    step = 4 * batch_size
    for lo in range(0, len(cands), step):
        chunk_rows = list(range(lo, min(lo + step, len(cands))))
        for chunk in _groups(cands, chunk_rows, step):
            toks = _tokens(cands.tokens, chunk, model)
            pred = model.logits_from(toks, toks.shape[1] - 1)[:, -1].argmax(-1).tolist()
            good += [i for i, p in zip(chunk, pred) if p == cands.answer_token[i]]
        if len(good) >= wanted:
            break
    return sorted(good)[:wanted]


def _tokens(prompts: Sequence[Sequence[int]], rows: list[int], model: HookedModel) -> Tensor:
    return torch.tensor([prompts[i] for i in rows], device=model.device)


def _ld(logits: Tensor, ans: Tensor, ans2: Tensor) -> Tensor:
    """``logit(a′ + b) − logit(a + b)`` per row."""
    return (logits.gather(-1, ans2[:, None]) - logits.gather(-1, ans[:, None]))[:, 0].float()


def _summarise(
    s: Tensor,
    depths: tuple[int, ...],
    k: int,
    pairs: PairSet,
    template: str,
    reading: str,
    n_random: int,
    uncertainty: Uncertainty,
) -> HelixPatchResult:
    """Means, bootstrap intervals and fractions of the full patch from per-pair shifts ``[pair, depth, cond]``."""
    per = torch.cat([s[..., :3], s[..., 3:].mean(-1, keepdim=True) if n_random else s[..., :1] * float("nan")], -1)
    n_boot, confidence, seed = uncertainty.n_boot, uncertainty.confidence, uncertainty.seed
    idx = bootstrap_indices(per.shape[0], n_boot, seed)
    boots = per[idx].mean(1)  # [boot, depth, cond]
    frac_boot = boots / boots[..., :1]
    a = 1 - confidence
    mean = per.mean(0)
    diff = boots[..., 1] - boots[..., 2]
    return HelixPatchResult(
        depths=depths,
        conditions=CONDITIONS,
        shift=mean,
        low=quantile(boots, a / 2),
        high=quantile(boots, 1 - a / 2),
        fraction=mean / mean[:, :1],
        fraction_low=quantile(frac_boot, a / 2),
        fraction_high=quantile(frac_boot, 1 - a / 2),
        random_draws=s[..., 3:].mean(0) if n_random else torch.zeros(len(depths), 0, device="cpu"),
        helix_minus_pca=mean[:, 1] - mean[:, 2],
        diff_low=quantile(diff, a / 2),
        diff_high=quantile(diff, 1 - a / 2),
        k=k,
        pairs=tuple(zip(pairs.a, pairs.cf_a, pairs.b)),
        template=template,
        reading=reading + "; patched at a's last token",
        seed=seed,
        n_boot=n_boot,
        confidence=confidence,
    )
