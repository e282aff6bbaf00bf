"""One attention head as a value: :class:`Head`, whose text is ``L{layer}.H{head}``, and the one head check.

A :class:`Head` *is* a tuple (``Head(14, 2) == (14, 2)``; ``layer, head = h``); its ``str`` is the name the
paper and every table use::

    >>> str(Head(14, 2)), Head.parse("L14.H2")
    ('L14.H2', Head(layer=14, head=2))
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from mathcircuits._errors import FixableValueError
from mathcircuits.models.spec import ModelSpec

__all__ = [
    "Head",
]

_NAME = re.compile(r"^L(\d+)\.H(\d+)$")


class Head(NamedTuple):
    """An attention head: ``layer`` and query ``head`` index (0-based). Its ``str`` is ``L{layer}.H{head}``."""

    layer: int
    head: int

    def __str__(self) -> str:
        return f"L{self.layer}.H{self.head}"

    @classmethod
    def parse(cls, text: str) -> Head:
        """The head named ``text`` (``"L14.H2"``, as :func:`str` writes it)."""
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
    """The heads of ``heads`` as :class:`Head` values, each checked against the model, in the given order.

    No head (unless ``allow_empty``: a knockout of nothing) or a repeated head is a ``ValueError``, a head out of
    range an ``IndexError``. A selection is checked against the model by its own ``check_model`` first
    (:func:`mathcircuits.patching.key_components.resolve_heads`).
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
