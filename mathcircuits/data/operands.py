"""An operation's answer under the answer rules; which operand pairs a config allows is beside the config
(:func:`.generate.operand_pairs`).

:class:`PairError` is the error of every step of building a pair (here, :mod:`.render` and :mod:`.generate`).
"""

from __future__ import annotations

from fractions import Fraction

from mathcircuits._errors import FixableError
from mathcircuits.data.templates import OPERATIONS, Operation

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
