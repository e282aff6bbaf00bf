"""Fourier spectra along the number axis, each against a shuffled-order null and a tokenizer baseline.

Zhou et al. (2024) find spikes at periods about 2, 2.5, 5 and 10 in what MLPs and heads write along the axis of
numbers. Fu et al. (2026) find the same spikes in every model and even in the raw frequencies of number tokens,
so a spectrum alone is no evidence that a model computes with periodic features. Every spectrum has two nulls:

* **shuffled order**: the number labels permuted (one permutation for all contexts and dimensions),
  ``n_shuffles`` times. A period is *above the null* when the lower end of its power's interval exceeds the
  ``confidence`` quantile of the **largest** share any frequency reaches in the shuffled spectra (family-wise
  over frequencies);
* **tokenizer baseline**: for a digit-split tokenizer the embedding (depth 0) is exactly periodic in 10 and its
  harmonics, and the periods above the null there are ``baseline_periods``. For single-token numbers it is the
  spectrum of the numbers' token frequencies (given, or the BPE id as a rank proxy: merges follow pair
  frequency).

Formula. For vectors ``x_n`` (``n = 0 … N−1``, centred over ``n``) with columns ``j`` (contexts × dimensions, or
prompts), ``F_k = Σ_n x_n e^{−2πikn/N}`` and the power share of frequency ``k = 1 … ⌊N/2⌋`` (period ``T = N/k``)
is ``P(k) = Σ_j |F_kj|² / Σ_k' Σ_j |F_k'j|²``. Its interval resamples the columns (percentile bootstrap). The
shuffled spectra need only the Gram matrix ``G = Σ_j x_j x_jᵀ``: ``P_π(k) ∝ φ_kᴴ G[π, π] φ_k``.

References: Zhou et al., "Pre-trained Large Language Models Use Fourier Features to Compute
Addition" (NeurIPS 2024), §3; Fu et al., "Convergent evolution" (2026).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits.numbers.results import quantile
from mathcircuits.numbers.states import NumberStates
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.bootstrap import bootstrap_indices
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE, DEFAULT_UNCERTAINTY

__all__ = [
    "Spectrum",
    "number_spectra",
]


def _dft(n: int) -> Tensor:
    """The DFT rows ``φ_k`` for ``k = 1 … ⌊n/2⌋`` [freq, n] (complex128)."""
    k = torch.arange(1, n // 2 + 1, dtype=torch.float64)[:, None]
    j = torch.arange(n, dtype=torch.float64)[None]
    return torch.exp(-2j * math.pi * k * j / n)


def column_power(x: Float[Tensor, "number column"]) -> Float[Tensor, "freq column"]:
    """``|F_k|²`` (float64) of each column of ``x`` along the number axis (centred), for ``k = 1 … ⌊N/2⌋``."""
    x = x.double() - x.double().mean(0)
    return (_dft(x.shape[0]) @ x.to(torch.complex128)).abs() ** 2


def _shuffled_shares(x: Tensor, n_shuffles: int, seed: int) -> Tensor:
    """Shares ``[shuffle, freq]`` with the number axis permuted: DFT rows permuted against ``G`` (two matmuls)."""
    x = x.double() - x.double().mean(0)
    gram = x @ x.T
    phi = _dft(x.shape[0])
    gen = torch.Generator().manual_seed(seed)
    perms = torch.stack([torch.randperm(x.shape[0], generator=gen) for _ in range(n_shuffles)])
    out = torch.empty(n_shuffles, phi.shape[0], dtype=torch.float64)
    for i in range(0, n_shuffles, 50):
        p = perms[i : i + 50]
        c, s = phi.real[:, p].transpose(0, 1), phi.imag[:, p].transpose(0, 1)  # [shuffle, freq, number]
        out[i : i + 50] = ((c @ gram) * c).sum(-1) + ((s @ gram) * s).sum(-1)
    return out / out.sum(1, keepdim=True).clamp_min(1e-300)


def _bootstrap_shares(power: Tensor, uncertainty: Uncertainty) -> tuple[Tensor, Tensor]:
    """Percentile interval of the shares, resampling the columns of ``power`` [freq, column]."""
    n_boot = uncertainty.n_boot
    cols = power.shape[1]
    if cols < 2:
        share = power.sum(1) / power.sum().clamp_min(1e-300)
        return share, share
    idx = bootstrap_indices(cols, n_boot, uncertainty.seed)
    weights = torch.zeros(n_boot, cols, dtype=torch.float64).scatter_add_(
        1, idx, torch.ones(idx.shape, dtype=torch.float64)
    )
    num = weights @ power.T  # [boot, freq]
    shares = num / num.sum(1, keepdim=True).clamp_min(1e-300)
    a = 1 - uncertainty.confidence
    return quantile(shares, a / 2), quantile(shares, 1 - a / 2)


@dataclass(frozen=True, repr=False)
class Spectrum(SavedResult):
    """Power share per period along the number axis, per row (depth or component), with its nulls.

    ``periods`` are ``N / k`` for ``k = 1 … ⌊N/2⌋``; ``power`` is ``[row, freq]`` with a bootstrap interval over
    columns; ``null_low``/``null_high`` are per-frequency quantiles of the shuffled spectra and ``null_max`` the
    ``confidence`` quantile of the largest shuffled share per row (the family-wise bound); ``baseline_periods`` are
    the periods the tokenizer baseline already shows.
    """

    source: str
    rows: tuple[str, ...]
    axis: str
    periods: tuple[float, ...]
    power: Float[Tensor, "row freq"]
    low: Float[Tensor, "row freq"]
    high: Float[Tensor, "row freq"]
    null_low: Float[Tensor, "row freq"]
    null_high: Float[Tensor, "row freq"]
    null_max: Float[Tensor, " row"]
    baseline_periods: tuple[float, ...]
    baseline: str
    reading: str
    n_shuffles: int
    n_boot: int
    seed: int
    confidence: float = DEFAULT_CONFIDENCE

    STAGE = "numbers"

    @property
    def above(self) -> Bool[Tensor, "row freq"]:
        """Which periods lie above the null: interval's lower end above the family-wise shuffled bound."""
        return self.low > self.null_max[:, None]

    def row_index(self, row: str | int) -> int:
        if isinstance(row, int):
            return row
        if row not in self.rows:
            raise KeyError(f"no row {row!r}; this spectrum has {list(self.rows)}.")
        return self.rows.index(row)

    def periods_above(self, row: str | int) -> tuple[float, ...]:
        """The periods above the null in one row, strongest first."""
        i = self.row_index(row)
        ks = [k for k in range(len(self.periods)) if bool(self.above[i, k])]
        return tuple(self.periods[k] for k in sorted(ks, key=lambda k: -float(self.power[i, k])))

    def bands(self, n_bands: int = 3) -> dict[str, tuple[float, ...]]:
        """Periods above the null in at least half the rows of each band of depths (``emb`` is its own band).

        E.g. ``{"emb": (10.0, 5.0), "early 1–10": (...), ...}`` for 3 bands.
        """
        out: dict[str, tuple[float, ...]] = {}
        body = list(range(len(self.rows)))
        if self.rows and self.rows[0] == "emb":
            out["emb"] = self.periods_above(0)
            body = body[1:]
        if not body:
            return out
        names = ["early", "middle", "late"] if n_bands == 3 else [f"band {i + 1}" for i in range(n_bands)]
        chunks = [c.tolist() for c in torch.tensor(body).chunk(n_bands) if len(c)]
        for name, rows in zip(names, chunks):
            share = self.above[rows].float().mean(0)
            ks = [k for k in range(len(self.periods)) if float(share[k]) >= 0.5]
            mean = self.power[rows].mean(0)
            label = f"{name} {self.rows[rows[0]]}–{self.rows[rows[-1]]}"
            out[label] = tuple(self.periods[k] for k in sorted(ks, key=lambda k: -float(mean[k])))
        return out

    def beyond_baseline(self, row: str | int) -> tuple[float, ...]:
        """Periods above the null in ``row`` that the tokenizer baseline does not already show."""
        base = {round(p, 6) for p in self.baseline_periods}
        return tuple(p for p in self.periods_above(row) if round(p, 6) not in base)

    def headline(self) -> str:
        return f"{self.source}; {len(self.rows)} rows x {len(self.periods)} periods; baseline {self.baseline}"

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (row, period): power share, interval, null band and whether it is above the null."""
        recs = []
        for i, r in enumerate(self.rows):
            for k, p in enumerate(self.periods):
                recs.append(
                    {
                        "row": r,
                        "period": p,
                        "power": float(self.power[i, k]),
                        "low": float(self.low[i, k]),
                        "high": float(self.high[i, k]),
                        "null_low": float(self.null_low[i, k]),
                        "null_high": float(self.null_high[i, k]),
                        "null_max": float(self.null_max[i]),
                        "above_null": bool(self.above[i, k]),
                        "in_baseline": round(p, 6) in {round(b, 6) for b in self.baseline_periods},
                    }
                )
        return pd.DataFrame(recs)


def spectrum(
    data: Sequence[Float[Tensor, "number column"]],
    rows: Sequence[str],
    *,
    source: str,
    axis: str,
    reading: str = "",
    baseline_periods: Sequence[float] = (),
    baseline: str = "none",
    n_shuffles: int = 200,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> Spectrum:
    """The spectrum of each row's ``[number, column]`` matrix, with intervals and the shuffled-order null.

    Columns are dimensions, or prompts, or contexts x dimensions. ``uncertainty``'s seed + 1 also draws the shuffles;
    its level is that of the intervals and of the null bound.
    """
    if len(data) != len(rows) or not rows:
        raise FixableValueError(f"got {len(data)} matrices for {len(rows)} row labels. ", "pass one label per matrix.")
    n = data[0].shape[0]
    if n < 4 or any(x.shape[0] != n for x in data):
        raise FixableValueError(
            f"every matrix needs the same number axis of at least 4 numbers (got {n}). ", "more numbers."
        )
    n_boot, confidence, seed = uncertainty.n_boot, uncertainty.confidence, uncertainty.seed
    a = 1 - confidence
    cols = {k: [] for k in ("power", "low", "high", "null_low", "null_high", "null_max")}
    for x in data:
        p = column_power(x)
        lo, hi = _bootstrap_shares(p, uncertainty)
        null = _shuffled_shares(x, n_shuffles, seed + 1)
        cols["power"].append((p.sum(1) / p.sum().clamp_min(1e-300)).float())
        cols["low"].append(lo.float())
        cols["high"].append(hi.float())
        cols["null_low"].append(quantile(null, a / 2))
        cols["null_high"].append(quantile(null, 1 - a / 2))
        cols["null_max"].append(quantile(null.max(1).values, confidence))
    return Spectrum(
        source=source,
        rows=tuple(rows),
        axis=axis,
        periods=tuple(n / k for k in range(1, n // 2 + 1)),
        **{k: torch.stack(v) for k, v in cols.items()},
        baseline_periods=tuple(float(p) for p in baseline_periods),
        baseline=baseline,
        reading=reading,
        n_shuffles=n_shuffles,
        n_boot=n_boot,
        seed=seed,
        confidence=confidence,
    )


def frequency_spectrum(
    frequencies: Sequence[float], numbers: Sequence[int], n_shuffles: int = 200, seed: int = 0
) -> Spectrum:
    """The spectrum of the numbers' (log) token frequencies: the baseline of Fu et al. (2026).

    One row, no interval (one column).
    """
    f = torch.as_tensor(list(frequencies), dtype=torch.float64)
    if (f <= 0).any() or len(f) != len(numbers):
        raise FixableValueError("frequencies must be positive, one per number. ", "pass counts (add 1 to zeros).")
    return spectrum(
        [f.log()[:, None]],
        ["log frequency"],
        source="token frequency",
        axis=f"numbers {min(numbers)}–{max(numbers)}",
        n_shuffles=n_shuffles,
        uncertainty=Uncertainty(n_boot=1, seed=seed),
    )


def number_spectra(
    states: NumberStates,
    frequencies: Sequence[float] | None = None,
    n_shuffles: int = 200,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> Spectrum:
    """Spectra of the number states at every depth (depth 0: the token embedding), with both nulls.

    ``frequencies`` None uses the BPE id as a rank proxy (lower id = merged earlier = more frequent),
    ``1 / (id + 1)``. The bootstrap resamples contexts x dimensions; its seed also draws the shuffles.
    """
    nums = list(states.numbers)
    if nums != list(range(nums[0], nums[0] + len(nums))):
        raise FixableValueError(
            "the spectrum needs consecutive numbers (e.g. 0–99). ", "record states for range(lo, hi+1)."
        )
    c, n, d, w = states.states.shape
    data = [states.states[:, :, depth].permute(1, 0, 2).reshape(n, c * w) for depth in range(d)]
    axis = f"numbers {nums[0]}–{nums[-1]}"
    if states.tokenization == "multi-token":
        emb = spectrum(
            data[:1],
            ["emb"],
            source="",
            axis=axis,
            n_shuffles=n_shuffles,
            uncertainty=uncertainty,
        )
        base, what = emb.periods_above(0), "the last token alone (depth 0: the units digit's embedding)"
    else:
        freqs = frequencies if frequencies is not None else [1.0 / (t + 1) for t in states.last_tokens]
        fs = frequency_spectrum(freqs, nums, n_shuffles, uncertainty.seed)
        src = "given token frequencies" if frequencies is not None else "token-id rank as frequency proxy"
        base, what = tuple(p for k, p in enumerate(fs.periods) if bool(fs.power[0, k] > fs.null_max[0])), src
    return spectrum(
        data,
        states.depths,
        source="residual at the number's last token",
        axis=axis,
        reading=states.reading,
        baseline_periods=base,
        baseline=what,
        n_shuffles=n_shuffles,
        uncertainty=uncertainty,
    )
