"""The uniform evaluation item, and the two things done to a list of them (table, subsample).

* **math** items: ``question`` and a numeric gold ``answer`` string
  (``rationale`` holds the data set's chain of thought, model-written and noisy);
* **choice** items: ``question``, a tuple of ``choices`` and ``gold_index``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import pandas as pd

from mathcircuits._errors import FixableValueError
from mathcircuits._files import JSONObject

__all__ = [
    "BenchmarkItem",
]

Kind = Literal["math", "choice"]


@dataclass(frozen=True)
class BenchmarkItem:
    """One evaluation item.

    ``answer`` is the gold answer as text: a number for math items, the correct
    option's text for choice items (whose index is ``gold_index`` into ``choices``).
    """

    benchmark: str
    question: str
    answer: str
    choices: tuple[str, ...] = ()
    gold_index: int = -1
    rationale: str = ""
    uid: str = ""

    @property
    def kind(self) -> Kind:
        """``"choice"`` when the item has options, else ``"math"``."""
        return "choice" if self.choices else "math"

    def to_dict(self) -> JSONObject:
        """The fields as a JSON-able dict (``choices`` as a list)."""
        d = asdict(self)
        d["choices"] = list(self.choices)
        return d

    @classmethod
    def from_dict(cls, d: JSONObject) -> BenchmarkItem:
        """The inverse of :meth:`to_dict` (unknown keys are ignored)."""
        d = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        d["choices"] = tuple(d.get("choices", ()))
        return cls(**d)


def items_to_dataframe(items: Sequence[BenchmarkItem]) -> Any:
    """One row per item, for reading a benchmark at a glance.

    ``choices`` are joined by `` | ``.
    """

    rows = []
    for it in items:
        d = it.to_dict()
        d["choices"] = " | ".join(it.choices)
        d["kind"] = it.kind
        rows.append(d)
    columns = ["benchmark", "kind", "uid", "question", "answer", "choices", "gold_index", "rationale"]
    return pd.DataFrame(rows, columns=columns)


def subsample(items: Sequence[BenchmarkItem], limit: int | None = None, seed: int = 0) -> list[BenchmarkItem]:
    """A seeded random subset of the items, kept in their original order.

    ``limit`` None (or at least ``len(items)``) keeps all; the same seed gives the same subset.
    """
    items = list(items)
    if limit is None or limit >= len(items):
        return items
    if limit < 0:
        raise FixableValueError(f"limit={limit} is negative. ", "pass a positive number of items, or None for all.")
    keep = sorted(random.Random(seed).sample(range(len(items)), limit))
    return [items[i] for i in keep]
