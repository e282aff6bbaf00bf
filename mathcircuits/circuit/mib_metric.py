"""``m``, the metric MIB's curves are made of, and the pairs it can read (shared by the MIB scores and EAP/EAP-IG).

``logit_diff`` is read where a pair's two answers first differ (the shared leading digits teacher-forced); a pair
whose answers differ in no shared position cannot be read and is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

import torch
from jaxtyping import Int
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.circuit.intervene import RunScore, answer_logprob
from mathcircuits.data.pairset import PairSet

__all__ = [
    "MIBMetric",
]

#: What ``m`` is: MIB's logit difference at the first differing answer token, or the whole answer's log-probability.
MIBMetric: TypeAlias = Literal["logit_diff", "answer_logprob"]


@dataclass(frozen=True)
class MIBReadout:
    """The pairs ``metric`` can score (``rows``), and ``m``'s readout on a batch of them (:meth:`of`).

    ``first``/``good``/``bad`` (``logit_diff`` only; one entry per pair, 0 where the pair is dropped): the answer
    position read, the answer's and the counterfactual answer's token there. Host tensors; :meth:`of` moves them.
    """

    metric: MIBMetric
    rows: tuple[int, ...]
    n_pairs: int
    first: Int[Tensor, " pair"] | None = None
    good: Int[Tensor, " pair"] | None = None
    bad: Int[Tensor, " pair"] | None = None

    @property
    def dropped(self) -> int:
        return self.n_pairs - len(self.rows)

    def of(self, idx: list[int]) -> RunScore:
        """``m`` on the batch of pairs ``idx`` (rows of the pair set), as a readout of the answer positions' logits."""
        if self.first is None or self.good is None or self.bad is None:
            return answer_logprob
        first, good, bad = self.first[idx], self.good[idx], self.bad[idx]

        def readout(logits: Tensor, answers: Tensor) -> Tensor:
            reps = logits.shape[0] // first.shape[0]
            j, g, b = (t.to(logits.device).repeat(reps) for t in (first, good, bad))
            rows = torch.arange(logits.shape[0], device=logits.device)
            return logits[rows, j, g].float() - logits[rows, j, b].float()

        return readout


def _first_difference(answer: tuple[int, ...], cf_answer: tuple[int, ...]) -> int | None:
    return next((j for j, (a, c) in enumerate(zip(answer, cf_answer)) if a != c), None)


def mib_readout(pairs: PairSet, metric: MIBMetric) -> MIBReadout:
    """The rows of ``pairs`` that ``metric`` can score, and its readout.

    Raises:
        FixableValueError: an unknown metric; ``logit_diff`` on pairs without counterfactual answers, or on pairs
            none of which can be read.
    """
    if metric == "answer_logprob":
        return MIBReadout(metric, tuple(range(len(pairs))), len(pairs))
    if metric != "logit_diff":
        raise FixableValueError(f"metric {metric!r} is unknown. ", "use 'logit_diff' or 'answer_logprob'.")
    if not pairs.has("cf_answer_tokens"):
        raise FixableValueError(
            "metric 'logit_diff' needs each pair's counterfactual answer (cf_answer_tokens). ",
            "generate pairs with an operand counterfactual (counterfactual='operands' or an MIB kind), or "
            "metric='answer_logprob'.",
        )
    ans, cf_ans = pairs.answer_tokens, pairs.cf_answer_tokens
    firsts = [_first_difference(a, c) for a, c in zip(ans, cf_ans)]
    rows = tuple(i for i, j in enumerate(firsts) if j is not None)
    if not rows:
        raise FixableValueError("no pair's answers differ in a shared token position. ", "other counterfactuals.")

    def column(tokens: tuple[tuple[int, ...], ...]) -> Tensor:
        return torch.tensor([t[j] if j is not None else 0 for t, j in zip(tokens, firsts)], device="cpu")

    first = torch.tensor([j if j is not None else 0 for j in firsts], device="cpu")
    return MIBReadout(metric, rows, len(pairs), first, column(ans), column(cf_ans))
