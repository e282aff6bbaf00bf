"""One attention head as a value: :class:`Head`, whose text is ``L{layer}.H{head}``, and the one head check.

Heads travel between every stage: path patching ranks them, a selection keeps some, the
knockout ablates them, the analyses read their attention, fine-tuning tunes their weight
slices, the report names them. A :class:`Head` is a ``(layer, head)`` pair (it *is* a
tuple, so ``Head(14, 2) == (14, 2)`` and it unpacks as ``layer, head = h``) whose ``str`` is
the name the paper and every table use::

    >>> str(Head(14, 2))
    'L14.H2'
    >>> Head.parse("L14.H2")
    Head(layer=14, head=2)

:func:`check_heads` turns what a user passes (``[(layer, head), ...]``) into heads of a
given model: a head out of range, no head, or a repeated head is an error naming the
problem and the fix (a selection is checked against the model by its own ``check_model``
first: :func:`mathcircuits.patching.resolve_heads`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from mathcircuits._errors import FixableValueError
from mathcircuits.models.spec import ModelSpec

__all__ = ["Head", "check_heads"]

_NAME = re.compile(r"^L(\d+)\.H(\d+)$")


class Head(NamedTuple):
    """An attention head: ``layer`` and query ``head`` index (0-based). Its ``str`` is ``L{layer}.H{head}``."""

    layer: int
    head: int

    def __str__(self) -> str:
        return f"L{self.layer}.H{self.head}"

    @classmethod
    def parse(cls, text: str) -> Head:
        """The head named ``text`` (``"L14.H2"``).

        Args:
            text: a head name as :func:`str` writes it.

        Returns:
            The head.

        Raises:
            ValueError: ``text`` is not of the form ``L<layer>.H<head>``.
        """
        m = _NAME.match(text.strip())
        if m is None:
            raise FixableValueError(f"{text!r} does not name a head. ", "write it as L<layer>.H<head>, e.g. 'L14.H2'.")
        return cls(int(m.group(1)), int(m.group(2)))

    @classmethod
    def of(cls, value: tuple[int, int] | Iterable[int]) -> Head:
        """A head from any ``(layer, head)`` pair (ints, or numbers that are whole)."""
        layer, head = value
        return cls(int(layer), int(head))


def check_heads(heads: Iterable[tuple[int, int]], spec: ModelSpec, *, allow_empty: bool = False) -> tuple[Head, ...]:
    """The heads of ``heads`` as :class:`Head` values, each checked against the model.

    Args:
        heads: ``(layer, head)`` pairs.
        spec: the model's spec (``model.spec``), which checks each head is in range.
        allow_empty: accept no head (e.g. a knockout of nothing: the clean model).

    Returns:
        The heads, in the given order.

    Raises:
        ValueError: if no heads are given (unless ``allow_empty``) or a head appears twice.
        IndexError: if a head is out of range.
    """
    out = tuple(Head.of(h) for h in heads)
    if not out and not allow_empty:
        raise FixableValueError(
            "no heads given. ", "pass KeyComponents with at least one head, or a list such as [(14, 2), (18, 5)]."
        )
    for layer, head in out:
        spec.check_head(layer, head)
    if len(set(out)) != len(out):
        raise FixableValueError(f"heads {[str(h) for h in out]} contain duplicates. ", "list each (layer, head) once.")
    return out
