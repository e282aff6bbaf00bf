"""The generalised helix of Kantamneni & Tegmark (2025), fitted per depth and compared with equal-dimension PCA.

Kantamneni & Tegmark find that GPT-J, Pythia and Llama hold a number ``a`` (0–99) on a *generalised helix*: a
linear map of ``B(a) = [a, cos(2πa/T), sin(2πa/T) for T in (2, 5, 10, 100)]`` (``sin(πa) = 0`` for whole ``a``,
so ``T = 2`` adds one column) fits the number's residual stream, and patching the fitted subspace moves the
answer as the number would. They compare the fit with a PCA baseline of the same dimension.

Fit. At each depth each number's state is averaged over the contexts (after removing each context's mean, so
template offsets do not count): ``X`` is ``[number, d_model]``, as in the paper's single-context analysis. Centre
it and solve ``X ≈ B(a) C``; the **helix subspace** is the row space of ``C`` (``k`` = columns of ``B``),
orthonormalised. The baselines are the top ``k`` principal components of ``X`` and random ``k``-dim subspaces.

Scores, cross-validated over numbers (folds hold out whole numbers): the **predictive R²** of held-out states
from ``a`` alone, ``1 − SSE / SST``, against the same fit with shuffled number labels; the **variance
explained** inside the helix, PCA and random subspaces (PCA is the best ``k``-dim subspace for the *training*
states, an upper reference rather than a rival). Intervals: percentile bootstrap over held-out numbers. The
causal test is :mod:`mathcircuits.numbers.patch`.

References: Kantamneni & Tegmark, "Language Models Use Trigonometry to Do Addition" (2025), §4 and Fig. 4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits.numbers.results import quantile
from mathcircuits.numbers.states import NumberStates
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.bootstrap import bootstrap_indices
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, DEFAULT_N_BOOT, DEFAULT_UNCERTAINTY

__all__ = [
    "HelixResult",
    "fit_helix",
]


def helix_basis(numbers: Sequence[int], periods: Sequence[int]) -> tuple[Float[Tensor, "number k"], tuple[str, ...]]:
    """``B(a)``: the linear term ``a / max`` and ``cos, sin(2πa/T)`` per period, without all-zero columns.

    Returns the basis ``[number, k]`` (float64) and a name per column (``"a"``, ``"cos 10"``, ...).
    """
    a = torch.as_tensor(list(numbers), dtype=torch.float64)
    cols, names = [a / max(float(a.abs().max()), 1.0)], ["a"]
    for t in periods:
        for fn, name in ((torch.cos, "cos"), (torch.sin, "sin")):
            col = fn(2 * math.pi * a / t)
            if float(col.abs().max()) > 1e-9:
                cols.append(col)
                names.append(f"{name} {t}")
    return torch.stack(cols, 1), tuple(names)


def orthonormal(vectors: Float[Tensor, "d_model k"]) -> Float[Tensor, "d_model k"]:
    """An orthonormal basis of the span of the columns (QR), as float32."""
    q, _ = torch.linalg.qr(vectors.double())
    return q.float()


def random_subspace(d_model: int, k: int, generator: torch.Generator) -> Float[Tensor, "d_model k"]:
    """A uniformly random ``k``-dimensional subspace of ``R^d_model`` (orthonormal columns)."""
    return orthonormal(torch.randn(d_model, k, generator=generator, dtype=torch.float64))


def _fit(x: Tensor, basis: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Least squares ``x − μ ≈ (B − β) C``: returns ``C``, ``μ`` and ``β``."""
    mu, beta = x.mean(0), basis.mean(0)
    b = basis - beta
    coef = torch.linalg.solve(b.T @ b, b.T @ (x - mu))  # normal equations: B has a handful of columns
    return coef, mu, beta


def _top_pcs(x: Tensor, k: int, generator: torch.Generator) -> Tensor:
    """Top ``k`` principal directions ``[d_model, k]`` by randomized SVD (Halko et al. 2011); exact for a clear gap."""
    q = torch.randn(x.shape[1], k + 10, generator=generator, dtype=x.dtype)
    y = x @ q
    for _ in range(4):
        y = x @ (x.T @ torch.linalg.qr(y).Q)
    basis = torch.linalg.qr(y).Q  # [rows, k + 10]
    _, _, vh = torch.linalg.svd(basis.T @ x, full_matrices=False)
    return vh[:k].T


def _number_means(x: Float[Tensor, "context number d_model"]) -> Float[Tensor, "number d_model"]:
    """Each number's state averaged over contexts, after removing each context's own mean (its offset)."""
    x = x.double()
    return (x - x.mean(1, keepdim=True)).mean(0)


def _inside(x: Tensor, q: Tensor) -> Tensor:
    """Squared norm of each row of ``x`` inside the span of ``q``'s orthonormal columns."""
    return ((x @ q) ** 2).sum(1)


@dataclass(frozen=True, repr=False)
class HelixResult(SavedResult):
    """The helix fit per depth against equal-dimension PCA and random subspaces (see the module docstring).

    ``r2`` is the cross-validated predictive R² (``null_r2``: its ``confidence`` quantile with shuffled labels);
    ``*_ve`` the held-out variance inside the helix, top-``k`` PCA and random subspaces (random: mean over draws, its
    bounds the quantiles over them). ``subspaces`` and ``pca_subspaces`` are ``[depth, d_model, k]``, fitted on all
    numbers. At ``best_depth`` (highest R²), ``plane_coords`` holds each number's mean state in each period's
    (cos, sin) plane ``[period, number, 2]`` and ``plane_share`` each plane's share of their variance.
    """

    periods: tuple[int, ...]
    basis_names: tuple[str, ...]
    depths: tuple[str, ...]
    r2: Float[Tensor, " depth"]
    low_r2: Float[Tensor, " depth"]
    high_r2: Float[Tensor, " depth"]
    null_r2: Float[Tensor, " depth"]
    helix_ve: Float[Tensor, " depth"]
    helix_low: Float[Tensor, " depth"]
    helix_high: Float[Tensor, " depth"]
    pca_ve: Float[Tensor, " depth"]
    pca_low: Float[Tensor, " depth"]
    pca_high: Float[Tensor, " depth"]
    random_ve: Float[Tensor, " depth"]
    random_low: Float[Tensor, " depth"]
    random_high: Float[Tensor, " depth"]
    subspaces: Float[Tensor, "depth d_model k"]
    pca_subspaces: Float[Tensor, "depth d_model k"]
    plane_coords: Float[Tensor, "period number two"]
    plane_share: Float[Tensor, " period"]
    best_depth: int
    numbers: tuple[int, ...]
    folds: int
    reading: str
    n_random: int
    n_shuffles: int
    seed: int = 0
    n_boot: int = DEFAULT_N_BOOT
    confidence: float = DEFAULT_CONFIDENCE

    STAGE = "numbers"

    @property
    def k(self) -> int:
        """The helix's dimension (columns of the basis)."""
        return len(self.basis_names)

    def subspace(self, depth: int) -> Float[Tensor, "d_model k"]:
        """The orthonormal helix subspace at ``depth`` (fitted on all states)."""
        return self.subspaces[depth]

    def above_null(self, depth: int) -> bool:
        """Whether the R² interval's lower end exceeds the shuffled-label null at ``depth``."""
        return bool(self.low_r2[depth] > self.null_r2[depth])

    def headline(self) -> str:
        b = self.best_depth
        return (
            f"best depth {self.depths[b]}: R² {self.r2[b]:.2f} [{self.low_r2[b]:.2f}, {self.high_r2[b]:.2f}] "
            f"(null {self.null_r2[b]:.2f}); variance in {self.k} dims: helix {self.helix_ve[b]:.2f}, "
            f"PCA {self.pca_ve[b]:.2f}, random {self.random_ve[b]:.2f}"
        )

    def to_dataframe(self) -> pd.DataFrame:
        """One row per depth: predictive R² (with null), and variance explained by helix, PCA and random subspaces."""
        return pd.DataFrame({"depth": list(self.depths), **{c: getattr(self, c).tolist() for c in _SCORES}})


_SCORES = (
    "r2",
    "low_r2",
    "high_r2",
    "null_r2",
    "helix_ve",
    "helix_low",
    "helix_high",
    "pca_ve",
    "pca_low",
    "pca_high",
    "random_ve",
    "random_low",
    "random_high",
)


def _ratio_interval(num: Tensor, den: Tensor, weights: Tensor, confidence: float) -> tuple[float, float]:
    """Bootstrap interval of ``Σ num / Σ den`` with unit weights ``[boot, unit]``."""
    r = (weights @ num.double()) / (weights @ den.double()).clamp_min(1e-300)
    a = 1 - confidence
    return float(quantile(r, a / 2)), float(quantile(r, 1 - a / 2))


def fit_helix(
    states: NumberStates,
    periods: Sequence[int] = (2, 5, 10, 100),
    folds: int = 5,
    n_random: int = 20,
    n_shuffles: int = 20,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> HelixResult:
    """Fit the helix at every depth; score it on held-out numbers against PCA and random subspaces.

    ``n_shuffles`` fits with shuffled number labels make the R² null; ``uncertainty``'s seed also draws the folds,
    subspaces and shuffles.
    """
    _, n, d, w = states.states.shape
    basis, names = helix_basis(states.numbers, periods)
    k = basis.shape[1]
    if n < 2 * k or folds < 2:
        raise FixableValueError(
            f"{n} numbers cannot fit a {k}-column helix with {folds} folds. ", "use 0–99 and folds>=2."
        )
    n_boot, confidence, seed = uncertainty.n_boot, uncertainty.confidence, uncertainty.seed
    rng = np.random.default_rng(seed)
    fold_of = torch.as_tensor(rng.permutation(n) % folds)
    gen = torch.Generator().manual_seed(seed)
    weights = torch.zeros(n_boot, n, dtype=torch.float64).scatter_add_(
        1, bootstrap_indices(n, n_boot, seed), torch.ones(n_boot, n, dtype=torch.float64)
    )
    out: dict[str, list[float]] = {key: [] for key in _SCORES}
    subspaces, pca_subspaces = torch.zeros(d, w, k), torch.zeros(d, w, k)
    shuffles = [torch.randperm(n, generator=gen) for _ in range(n_shuffles)]
    rand_q = [random_subspace(w, k, gen) for _ in range(n_random)]
    for depth in range(d):
        x = _number_means(states.states[:, :, depth])  # [number, w]
        sse, sst = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
        inside = {"helix": torch.zeros(n), "pca": torch.zeros(n), "random": torch.zeros(n_random, n)}
        null_sse = torch.zeros(n_shuffles, dtype=torch.float64)
        for f in range(folds):
            tr, te = (fold_of != f).nonzero()[:, 0], (fold_of == f).nonzero()[:, 0]
            coef, mu, beta = _fit(x[tr], basis[tr])
            cen = x[te] - mu
            sse[te] = ((cen - (basis[te] - beta) @ coef) ** 2).sum(1)
            sst[te] = (cen**2).sum(1)
            inside["helix"][te] = _inside(cen.float(), orthonormal(coef.T))
            inside["pca"][te] = _inside(cen.float(), _top_pcs(x[tr] - mu, k, gen).float())
            for r, q in enumerate(rand_q):
                inside["random"][r, te] = _inside(cen.float(), q)
            for s, perm in enumerate(shuffles):
                b = basis[perm]
                coef_s, mu_s, beta_s = _fit(x[tr], b[tr])
                null_sse[s] += float(((x[te] - mu_s - (b[te] - beta_s) @ coef_s) ** 2).sum())
        total = float(sst.sum())
        out["r2"].append(1 - float(sse.sum()) / total)
        lo, hi = _ratio_interval(sst - sse, sst, weights, confidence)
        out["low_r2"].append(lo)
        out["high_r2"].append(hi)
        out["null_r2"].append(float(quantile(1 - null_sse / total, confidence)) if n_shuffles else float("nan"))
        for key in ("helix", "pca"):
            out[f"{key}_ve"].append(float(inside[key].sum()) / total)
            lo, hi = _ratio_interval(inside[key], sst, weights, confidence)
            out[f"{key}_low"].append(lo)
            out[f"{key}_high"].append(hi)
        rv = inside["random"].sum(1) / total
        a = 1 - confidence
        out["random_ve"].append(float(rv.mean()) if n_random else float("nan"))
        out["random_low"].append(float(quantile(rv, a / 2)) if n_random else float("nan"))
        out["random_high"].append(float(quantile(rv, 1 - a / 2)) if n_random else float("nan"))
        subspaces[depth] = orthonormal(_fit(x, basis)[0].T)
        pca_subspaces[depth] = _top_pcs(x - x.mean(0), k, gen).float()
    r2s = torch.tensor(out["r2"])
    best = int(r2s[1:].argmax()) + 1 if d > 1 else 0
    coords, shares = _planes(_number_means(states.states[:, :, best]), basis, names, periods)
    return HelixResult(
        periods=tuple(int(t) for t in periods),
        basis_names=names,
        depths=states.depths,
        **{key: torch.tensor(v, dtype=torch.float32) for key, v in out.items()},
        subspaces=subspaces,
        pca_subspaces=pca_subspaces,
        plane_coords=coords,
        plane_share=shares,
        best_depth=best,
        numbers=states.numbers,
        folds=folds,
        reading=states.reading,
        n_random=n_random,
        n_shuffles=n_shuffles,
        seed=seed,
        n_boot=n_boot,
        confidence=confidence,
    )


def _planes(mean_states: Tensor, basis: Tensor, names: Sequence[str], periods: Sequence[int]) -> tuple[Tensor, Tensor]:
    """Each number's mean state in each period's fitted (cos, sin) plane, and each plane's variance share."""
    coef, mu, _ = _fit(mean_states, basis)
    cen = mean_states - mu
    total = float((cen**2).sum())
    coords, shares = [], []
    for t in periods:
        rows = [i for i, nm in enumerate(names) if nm in (f"cos {t}", f"sin {t}")]
        if len(rows) < 2:  # T = 2: one column; its "plane" is a line
            rows = rows + rows
        q = orthonormal(coef[rows].T) if rows[0] != rows[1] else orthonormal(coef[rows[:1]].T).repeat(1, 2)
        xy = cen.float() @ q
        coords.append(xy)
        shares.append(float((xy[:, : (1 if rows[0] == rows[1] else 2)] ** 2).sum()) / total)
    return torch.stack(coords), torch.tensor(shares)
