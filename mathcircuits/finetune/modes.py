"""Fine-tuning modes as values: ``precise``, ``precise@K+mlp``, ``random``, ``lora``, ``full`` ... parsed once.

A *mode* names what a fine-tuning run tunes. The grammar::

    base | precise | precise+mlp | precise@K | precise@K+mlp | random | lora | full      (K ≥ 1)

* ``base`` — no training (the reference row of a comparison);
* ``precise`` — the key heads (their q/k/v/o weight slices); ``+mlp`` adds the key MLPs;
* ``precise@K`` — the top-K heads of a ranking by path-patching effect (the paper's Table 2);
* ``random`` — as many heads as ``precise``, drawn from the non-key heads, matched in depth and KV groups;
* ``lora`` — PEFT LoRA on the attention projections, at the rank nearest ``precise``'s parameter count;
* ``full`` — every parameter.

Configs hold modes (a YAML string is parsed when the config loads); results save them as text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, TypeAlias

__all__ = ["Mode", "ModeKind", "SFTMethod"]

#: What a mode tunes, before its options (``@K``, ``+mlp``).
ModeKind: TypeAlias = Literal["base", "precise", "random", "lora", "full"]
#: How a run trains (the ``mode`` of :class:`~mathcircuits.finetune.SFTConfig`): one entry of ``train_sft``'s table.
SFTMethod: TypeAlias = Literal["precise", "full", "lora"]

_GRAMMAR = re.compile(r"^(?P<kind>base|precise|random|lora|full)(@(?P<k>[1-9][0-9]*))?(?P<mlp>\+mlp)?$")
_FIX = "Fix: use base, precise, precise+mlp, precise@K, precise@K+mlp (K >= 1, e.g. precise@16), random, lora or full."


@dataclass(frozen=True)
class Mode:
    """A fine-tuning mode (see the module docstring for the grammar).

    ``Mode.parse("precise@4+mlp")`` has ``kind="precise"``, ``top_k=4`` (None: the key heads), ``mlps=True``.
    """

    kind: ModeKind
    top_k: int | None = None
    mlps: bool = False

    def __post_init__(self) -> None:
        if (self.top_k is not None or self.mlps) and self.kind != "precise":
            raise ValueError(f"mode {self} is not understood: only precise takes @K or +mlp. {_FIX}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"mode {self} asks for {self.top_k} heads. {_FIX}")

    @classmethod
    def parse(cls, text: str | Mode) -> Mode:
        """The mode written as ``text`` (a :class:`Mode` is returned as it is); the error lists the grammar."""
        if isinstance(text, Mode):
            return text
        m = _GRAMMAR.match(str(text))
        if m is None or (m.group("kind") != "precise" and (m.group("k") or m.group("mlp"))):
            raise ValueError(f"mode {text!r} is not understood. {_FIX}")
        k = m.group("k")
        return cls(m.group("kind"), int(k) if k else None, bool(m.group("mlp")))  # type: ignore[arg-type]

    def __str__(self) -> str:
        return self.kind + (f"@{self.top_k}" if self.top_k is not None else "") + ("+mlp" if self.mlps else "")

    @property
    def method(self) -> SFTMethod | None:
        """The SFT method that trains this mode (``None`` for ``base``, which is not trained)."""
        if self.kind == "base":
            return None
        return "precise" if self.kind in ("precise", "random") else self.kind  # type: ignore[return-value]
