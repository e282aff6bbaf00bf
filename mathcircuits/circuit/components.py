"""Senders and receivers of sender → receiver path patching, and the checks that make them meaningful.

A **sender** (head or MLP) has its output patched at chosen positions; a **receiver** is what the patch
is measured through: the logits, one head's q/k/v input, or an MLP's input (Wang et al. 2023; Zhang et
al. 2024, App. B).

Grouped-query attention: keys and values are computed once per *KV group*, so a k/v receiver is a
group. Naming it by a query head is refused unless ``by_group=True`` says the whole group is meant
(``Receiver("k", 3, head=1, by_group=True)`` with groups of 2 is ``Receiver("k", 3, group=0)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from mathcircuits._errors import FixableValueError
from mathcircuits.circuit.config import EdgeSender
from mathcircuits.models import Head, hooks

__all__ = [
    "Receiver",
    "Sender",
    "upstream_senders",
]

RECEIVER_KINDS = ("logits", "q", "k", "v", "mlp")
SENDER_KINDS: tuple[str, ...] = get_args(EdgeSender)


@dataclass(frozen=True, order=True)
class Sender:
    """An attention head ``(layer, head)``, an MLP (``head == -1``), or the token embeddings (``Sender.INPUT``).

    ``"input"`` (layer and head -1) is upstream of every receiver: a sender of MIB's edge graph, never of discovery.
    """

    kind: Literal["head", "mlp", "input"]
    layer: int
    head: int = -1

    def __post_init__(self) -> None:
        if self.kind == "input":
            if (self.layer, self.head) != (-1, -1):
                raise FixableValueError("the input sender has no layer or head. ", "Sender('input', -1).")
            return
        if self.kind not in SENDER_KINDS:
            raise FixableValueError(
                f"sender kind {self.kind!r} is unknown. ", f"use one of {[*SENDER_KINDS, 'input']}."
            )
        if (self.kind == "head") != (self.head >= 0):
            raise FixableValueError(
                f"sender {self.kind} at layer {self.layer} with head={self.head}: a head sender names its query head "
                "(>= 0), an MLP sender none (-1). ",
                "Sender('head', layer, head) or Sender('mlp', layer).",
            )

    @property
    def name(self) -> str:
        if self.kind == "input":
            return "input"
        return str(Head(self.layer, self.head)) if self.kind == "head" else f"MLP{self.layer}"

    def check(self, spec: Any) -> None:
        """Refuse a layer or head index outside the model."""
        if self.kind == "input":
            return
        if self.kind == "head":
            spec.check_head(self.layer, self.head)
        elif not 0 <= self.layer < spec.n_layers:
            raise FixableValueError(
                f"sender {self.name}: layer {self.layer} is outside {spec.describe()} "
                f"(layers 0..{spec.n_layers - 1}). ",
                "name an existing MLP.",
            )


@dataclass(frozen=True)
class Receiver:
    """Where a sender's patch is received: the logits, a head's q/k/v input, or an MLP's input.

    Args:
        layer: ``-1`` for the logits.
        head: q: the query head; k/v: a query head of the KV group, only with ``by_group=True``.
        position: q: the query's position (``None``: the last); MLP: where its input is patched (``None``:
            every position); k/v: always every position.
    """

    kind: Literal["logits", "q", "k", "v", "mlp"]
    layer: int = -1
    head: int = -1
    group: int = -1
    by_group: bool = False
    position: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in RECEIVER_KINDS:
            raise FixableValueError(f"receiver kind {self.kind!r} is unknown. ", f"use one of {list(RECEIVER_KINDS)}.")

    def positions(self, seq_len: int) -> list[int]:
        """The positions at which the receiver's input is replaced, for prompts of ``seq_len`` tokens."""
        if self.kind in ("k", "v") or (self.kind == "mlp" and self.position is None):
            return list(range(seq_len))
        where = -1 if self.position is None else self.position
        return check_positions([where], seq_len, f"receiver {self.name}")

    @property
    def index(self) -> int:
        """The query head (q) or the KV group (k, v) of a resolved receiver."""
        return self.head if self.kind == "q" else self.group

    @property
    def name(self) -> str:
        if self.kind == "logits":
            return "logits"
        at = "" if self.position is None else f"@{self.position}"
        if self.kind == "mlp":
            return f"MLP{self.layer}.in{at}"
        if self.kind == "q":
            return f"{Head(self.layer, self.head)}.q{at}"
        return f"L{self.layer}.G{self.group}.{self.kind}"

    def hook(self) -> str:
        """The bridge hook whose value is the receiver's input (``hook_q/k/v``: a linear map of it)."""
        if self.kind == "mlp":
            return hooks.mlp_in(self.layer)
        return hooks.sub(self.layer, f"attn.hook_{self.kind}")

    def check(self, spec: Any) -> Receiver:
        """The resolved receiver (k/v named by a query head → its KV group; ``head`` set for q), or a clear error."""
        if self.kind not in RECEIVER_KINDS:
            raise FixableValueError(f"receiver kind {self.kind!r} is unknown. ", f"use one of {list(RECEIVER_KINDS)}.")
        if self.kind == "logits":
            return self
        if not 0 <= self.layer < spec.n_layers:
            raise FixableValueError(
                f"receiver {self.kind} at layer {self.layer} is outside {spec.describe()} "
                f"(layers 0..{spec.n_layers - 1}). ",
                "name an existing layer.",
            )
        if self.kind == "mlp":
            return Receiver("mlp", self.layer, position=self.position)
        if self.kind == "q":
            spec.check_head(self.layer, self.head)
            return Receiver("q", self.layer, head=self.head, position=self.position)
        if self.head >= 0:
            spec.check_head(self.layer, self.head)
            if not self.by_group and spec.group_size > 1:
                raise FixableValueError(
                    f"receiver {self.kind} of layer {self.layer} named by query head {self.head}: on {spec.describe()} "
                    f"keys and values belong to KV groups of {spec.group_size} query heads, so patching head "
                    f"{self.head}'s {self.kind} changes every head of group {self.head // spec.group_size}. ",
                    f"Receiver({self.kind!r}, {self.layer}, group={self.head // spec.group_size}), or "
                    f"Receiver({self.kind!r}, {self.layer}, head={self.head}, by_group=True) to say so.",
                )
            return Receiver(self.kind, self.layer, group=self.head // spec.group_size)
        if not 0 <= self.group < spec.n_kv_heads:
            raise FixableValueError(
                f"receiver {self.kind} of layer {self.layer}: KV group {self.group} is outside {spec.describe()} "
                f"(groups 0..{spec.n_kv_heads - 1}). ",
                "name an existing group (or a query head with by_group=True).",
            )
        return Receiver(self.kind, self.layer, group=self.group)

    def shared_by(self, spec: Any) -> list[int]:
        """The query heads that read this receiver (one for q; the whole KV group for k/v; none otherwise)."""
        if self.kind == "q":
            return [self.index]
        if self.kind in ("k", "v"):
            g = spec.group_size
            return list(range(self.index * g, (self.index + 1) * g))
        return []

    def is_downstream_of(self, sender: Sender, parallel: bool) -> bool:
        """Whether ``sender``'s output can reach this receiver (it lies in an earlier layer, or before in the block)."""
        if self.kind == "logits":
            return True
        if self.kind == "mlp" and sender.kind == "head" and not parallel:
            return sender.layer <= self.layer  # sequential blocks: the MLP reads its own layer's attention
        return sender.layer < self.layer


def upstream_senders(
    spec: Any, receiver: Receiver, parallel: bool, kinds: Sequence[str] = ("head", "mlp")
) -> list[Sender]:
    """Every head and/or MLP whose output can reach ``receiver``, by layer (a layer's heads before its MLP).

    ``parallel``: attention and MLP read the same input, so an MLP does not read its own layer's heads.
    """
    unknown = [k for k in kinds if k not in SENDER_KINDS]
    if unknown or not kinds:
        raise FixableValueError(
            f"sender kinds {list(kinds)}: {unknown or 'none given'}. ", f"use some of {list(SENDER_KINDS)}."
        )
    out = []
    for layer in range(spec.n_layers):
        if "head" in kinds:
            out += [Sender("head", layer, h) for h in range(spec.n_heads)]
        if "mlp" in kinds:
            out.append(Sender("mlp", layer))
    return [s for s in out if receiver.is_downstream_of(s, parallel)]


def check_positions(positions: Sequence[int], seq_len: int, what: str) -> list[int]:
    """Sorted, distinct, non-negative positions of a prompt of ``seq_len`` tokens (negative ones count from the end).

    ``what`` names their use in the error. ValueError when empty or outside ``-seq_len..seq_len-1``.
    """
    out = sorted({p + seq_len if p < 0 else p for p in positions})
    bad = [p for p in positions if not -seq_len <= p < seq_len]
    if bad or not out:
        raise FixableValueError(
            f"{what} positions {list(positions)} are out of range for prompts of {seq_len} tokens. ",
            f"use positions in 0..{seq_len - 1} (or -{seq_len}..-1), at least one.",
        )
    return out
