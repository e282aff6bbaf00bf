"""What the number results share: a short ``repr`` and an HTML view, null quantiles, and the error of a model that
answers too few prompts for a causal analysis.

Every result of :mod:`mathcircuits.numbers` is a frozen dataclass that prints as one
line (``headline()``) and shows its table in Jupyter (``to_dataframe()``). Null bands
are quantiles of draws (shuffles, random subspaces, random knockouts) taken in float64.

Usage::

    class MyResult(ShowResult): ...   # with headline() and to_dataframe()
"""

from __future__ import annotations

import html

import torch
from torch import Tensor

__all__ = ["ShowResult", "TooFewCorrect", "quantile"]


class TooFewCorrect(ValueError):
    """The model answers too few prompts correctly for a causal analysis: ``problem`` says which, ``fix`` what to do."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}. Fix: {fix}")
        self.problem, self.fix = problem, fix


def quantile(x: Tensor, q: float, dim: int = 0) -> Tensor:
    """``torch.quantile`` in float64 along ``dim`` (NaN-aware)."""
    return torch.nanquantile(x.double(), q, dim=dim).float()


class ShowResult:
    """A short ``repr`` and an HTML view for result dataclasses (declare them with ``repr=False``).

    Subclasses give :meth:`headline` (one line) and ``to_dataframe()`` (the table shown in Jupyter).
    """

    def headline(self) -> str:  # pragma: no cover - every subclass overrides it
        return type(self).__name__

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.headline()})"

    def _repr_html_(self) -> str:
        df = self.to_dataframe()  # type: ignore[attr-defined]
        more = f"<p><i>first 30 of {len(df)} rows; .to_dataframe() has all</i></p>" if len(df) > 30 else ""
        return (
            f"<div><b>{html.escape(type(self).__name__)}</b>: {html.escape(self.headline())}"
            f"{df.head(30).to_html(index=False, float_format=lambda v: f'{v:.3f}')}{more}</div>"
        )
