"""What a path-patching method scans and returns: :class:`Senders`, :class:`BatchEffects` and :class:`ScanFn`.

Each method (``exact``, ``reference``, ``attribution``) is one :class:`ScanFn`;
:func:`~mathcircuits.patching.path_patch` dispatches by a table of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias, get_args

from jaxtyping import Bool, Float, Int
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.data.pairs import PairBatch
from mathcircuits.patching.metrics import Metric

if TYPE_CHECKING:
    from mathcircuits.models import HookedModel

__all__ = [
    "Method",
    "SenderKind",
]

#: The path-patching methods (the keys of ``driver.METHODS``; the ``method`` choices of ``PatchingConfig``).
Method: TypeAlias = Literal["exact", "reference", "attribution"]

#: Which kind of component a scan patches (the ``senders`` choices of ``path_patch`` and ``PatchingConfig``).
SenderKind: TypeAlias = Literal["heads", "mlps"]
SENDER_KINDS: tuple[str, ...] = get_args(SenderKind)


@dataclass(frozen=True)
class Senders:
    """Which senders a scan patches: every head, every MLP, or both (``only`` narrows the reference scan).

    ``only``: ``{("head", layer, head), ("mlp", layer, -1), ...}``, the only senders computed (NaN elsewhere).
    """

    heads: bool = True
    mlps: bool = True
    only: frozenset[tuple[str, int, int]] | None = None

    def wants(self, kind: Literal["head", "mlp"], layer: int, head: int = -1) -> bool:
        """Whether the sender ``(kind, layer, head)`` is scanned."""
        chosen = self.heads if kind == "head" else self.mlps
        return chosen and (self.only is None or (kind, layer, head) in self.only)

    @classmethod
    def from_names(cls, names: Sequence[SenderKind]) -> Senders:
        """The senders named ``("heads",)``, ``("mlps",)`` or both; anything else is an error with the fix."""
        bad = [s for s in names if s not in SENDER_KINDS]
        if bad or not names:
            raise FixableValueError(
                f"senders {list(names)} are not understood. ", "use ('heads',), ('mlps',) or ('heads', 'mlps')."
            )
        return cls(heads="heads" in names, mlps="mlps" in names)


@dataclass(frozen=True)
class BatchEffects:
    """One batch's effects (NaN for senders not scanned), the clean answer logits and the total effects.

    ``total``: the counterfactual prompt's own effect (patching everything at once); ``excluded``: the
    pairs the metric refuses (``relative_logit``'s guard), whose effects are NaN.
    """

    heads: Float[Tensor, "batch layer head"]
    mlps: Float[Tensor, "batch layer"]
    clean_logit: Float[Tensor, " batch"]
    total: Float[Tensor, " batch"] | None = None
    excluded: Bool[Tensor, " batch"] | None = None


class ScanFn(Protocol):
    """The one signature of the three methods' scan functions."""

    def __call__(
        self, model: HookedModel, batch: PairBatch, senders: Senders, metric: Metric, *, chunk_rows: int, progress: bool
    ) -> BatchEffects: ...


def scan_answers(batch: PairBatch, metric: Metric) -> Int[Tensor, "batch n_answer"] | None:
    """The answer tokens a scan reads: every one when the metric reads them all (teacher forcing), else None.

    ValueError when the metric reads every answer token but the batch holds only the first.
    """
    if not metric.every_answer_token:
        return None
    if batch.answers is None:
        raise FixableValueError(
            f"metric {metric.name!r} reads every answer token, but the batch has only the first. ",
            "build the batches with pair_batches(..., answers=True) (path_patch does).",
        )
    return batch.answers
