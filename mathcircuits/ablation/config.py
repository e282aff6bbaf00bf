"""Settings of the validation of key heads: mean-ablation knockout and transfer to other data.

The ``validation`` section of a run configuration; its fields go unchanged to
:func:`~mathcircuits.ablation.knockout_curve` and :func:`~mathcircuits.ablation.transfer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mathcircuits._schema import check_fields, setting

__all__ = ["ValidationConfig"]


@dataclass(frozen=True)
class ValidationConfig:
    """Knockout curves (key vs random heads) and transfer sets (paper §4)."""

    knockout_max_k: int = setting(10, "knock out the top 1..K heads", ge=1)
    n_random: int = setting(3, "random head sets per K (the control)", ge=1)
    scope: Literal["all", "last"] = setting("all", "positions ablated: all, or the last token only")
    max_pairs: int = setting(32, "correct pairs per operation and per transfer set", ge=1)
    transfer_templates: bool = setting(True, "transfer to the time-span / accumulation word templates")
    transfer_multi_digit: bool = setting(True, "transfer to two-digit operands")
    word_problem_sets: tuple[str, ...] = setting(("SVAMP", "AddSub", "SingleEq"), "benchmark word-problem sets")
    word_problem_root: str | None = setting(None, "benchmark folder; null: $MATHCIRCUITS_BENCHMARKS or the default")
    word_problem_limit: int = setting(48, "items per word-problem set", ge=1)

    def __post_init__(self) -> None:
        check_fields(self)
