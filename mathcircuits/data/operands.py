"""Which pairs exist: an operation's answer under the answer rules, and the operand pairs a config allows.

:class:`PairError` is the error of every step of building a pair (here, :mod:`.render` and :mod:`.generate`).
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from mathcircuits._errors import FixableError
from mathcircuits.data.templates import OPERATIONS, Operation

if TYPE_CHECKING:
    from mathcircuits.data.generate import GenerationConfig

__all__ = [
    "PairError",
]


class PairError(FixableError, ValueError):
    """A prompt pair cannot be built as asked; the message says why and how to fix it."""


def compute_answer(
    operation: Operation, a: int, b: int, integer_only: bool = True, allow_negative: bool = False
) -> str | None:
    """The answer string for ``a <op> b``, or None when the rule excludes the pair.

    ``integer_only`` excludes divisions with a remainder (else two decimals).
    """
    if operation == "add":
        value: Fraction | int = a + b
    elif operation == "sub":
        value = a - b
    elif operation == "mul":
        value = a * b
    elif operation == "div":
        if b == 0:
            return None
        value = Fraction(a, b)
    elif operation == "pow":
        value = a**b
    else:
        raise PairError(f"operation {operation!r} is unknown. ", f"use one of {OPERATIONS}.")
    if value < 0 and not allow_negative:
        return None
    if isinstance(value, Fraction):
        if value.denominator == 1:
            return str(value.numerator)
        if integer_only:
            return None
        return f"{float(value):.2f}".rstrip("0")
    return str(value)


def operand_pairs(op: Operation, cfg: GenerationConfig) -> list[tuple[int, int, str]]:
    """Every ``(a, b, answer)`` of operation ``op`` that ``cfg``'s operand range and answer rules allow.

    In a fixed order; for division, divisor and quotient are in range.
    """
    lo, hi = cfg.operand_range
    out = []
    if op == "div" and cfg.integer_only:
        # divisor and quotient in range, dividend = divisor * quotient (as in the paper's single-digit division)
        for b in range(max(lo, 1), hi + 1):
            for c in range(lo, hi + 1):
                out.append((b * c, b, str(c)))
        return out
    for a in range(lo, hi + 1):
        for b in range(lo, hi + 1):
            ans = compute_answer(op, a, b, cfg.integer_only, cfg.allow_negative)
            if ans is not None:
                out.append((a, b, ans))
    return out
