"""MIB's arithmetic counterfactual kinds: which operands a counterfactual changes (Mueller et al. 2025).

MIB's arithmetic task pairs ``"Q: How much is {A} plus {B}? A: "`` with a counterfactual prompt of another kind
(its dataset's columns; ``data_templates/mib/arithmetic.yaml`` has the prompt):

* ``random_counterfactual``: other operands, another answer (the one MIB's circuit track scores);
* ``ones_op1`` / ``ones_op2``: only the first / second operand's ones digit changes;
* ``tens_op1`` / ``tens_op2``: only its tens digit changes;
* ``ones_carry``: only the first operand's ones digit changes, so that the ones column's carry (a borrow, for
  subtraction) flips.

Every kind keeps the operands' digit counts (the prompts stay token-aligned on a digit-split tokenizer) and needs
another answer. MIB keeps only pairs whose two answers are single tokens; on a digit-split tokenizer (SmolLM2,
Gemma) that drops nearly every sum, so we keep them all and compare the answers at their first differing token
(:func:`~mathcircuits.circuit.mib_scores`): scores on these pairs are **MIB-style**, not MIB's.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, TypeAlias, get_args

from mathcircuits._errors import FixableValueError
from mathcircuits.data.templates import Operation

__all__: list[str] = []

#: MIB's counterfactual kinds for arithmetic.
MIBCounterfactual: TypeAlias = Literal[
    "random_counterfactual", "ones_op1", "ones_op2", "tens_op1", "tens_op2", "ones_carry"
]
MIB_KINDS: tuple[str, ...] = get_args(MIBCounterfactual)


def mib_template_dir() -> Path:
    """``data_templates/mib/``: MIB's prompt form (not among the default template sets)."""
    return Path(__file__).resolve().parents[2] / "data_templates" / "mib"


def _carry(operation: Operation, a: int, b: int) -> bool:
    return (a % 10 + b % 10 > 9) if operation == "add" else (a % 10 < b % 10)


def _fits(kind: str, operation: Operation, a: int, b: int, x: int, y: int) -> bool:
    if len(str(x)) != len(str(a)) or len(str(y)) != len(str(b)) or (x, y) == (a, b):
        return False
    if kind == "random_counterfactual":
        return True
    if kind in ("ones_op1", "ones_carry", "tens_op1") and y != b:
        return False
    if kind in ("ones_op2", "tens_op2") and x != a:
        return False
    if kind in ("ones_op1", "ones_carry"):
        return x // 10 == a // 10 and (kind == "ones_op1" or _carry(operation, x, y) != _carry(operation, a, b))
    if kind == "ones_op2":
        return y // 10 == b // 10
    if kind == "tens_op1":
        return x % 10 == a % 10
    return y % 10 == b % 10  # tens_op2


def mib_cf_operands(
    kind: str,
    operation: Operation,
    a: int,
    b: int,
    answer: str,
    candidates: Sequence[tuple[int, int, str]],
    rng: random.Random,
) -> tuple[int, int] | None:
    """Counterfactual operands of one MIB kind for ``a ∘ b`` from ``(x, y, answer)`` candidates (None: none fits).

    ``operation`` is ``"add"`` or ``"sub"`` (``ones_carry`` reads the ones column's carry or borrow).
    """
    if kind not in MIB_KINDS:
        raise FixableValueError(f"MIB counterfactual kind {kind!r} is unknown. ", f"use one of {list(MIB_KINDS)}.")
    if kind == "ones_carry" and operation not in ("add", "sub"):
        raise FixableValueError(f"ones_carry is defined for add and sub, not {operation!r}. ", "another kind.")
    if kind in ("ones_op1", "ones_carry", "tens_op1"):  # the second operand is kept: scan only those
        candidates = [c for c in candidates if c[1] == b]
    elif kind in ("ones_op2", "tens_op2"):
        candidates = [c for c in candidates if c[0] == a]
    fits = [(x, y) for x, y, z in candidates if z != answer and _fits(kind, operation, a, b, x, y)]
    return rng.choice(fits) if fits else None
