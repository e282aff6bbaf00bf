"""What a patch is measured by: the answer's readout and the metrics, as values.

A :class:`Metric` turns a patched and a clean :class:`~mathcircuits.models.Readout` (per row: the
answer's raw logit, and when needed its probability or the whole answer's log-probability) into an
effect. :data:`METRICS` registers four:

* ``answer_logprob`` (the default): patched − clean log-probability of the **whole answer**,
  teacher-forced over every answer token (SmolLM2 writes "12" as "1", "2")::

      log p(answer) = Σ_j log softmax(logits[t_j])[answer_j],   t_j = last prompt position + j

  Offset-free, and the knockout's target too. Path patching patches the sender at every readout
  position (attention is frozen, so each position's change stays there: more rows, not more passes).
* ``relative_logit``: (patched − clean) / clean of the first answer token's raw logit (Zhang et al.
  2024, Eq. 2). It depends on the logit offset softmax ignores, so a row with clean logit ≤
  :data:`RELATIVE_MIN_CLEAN` is excluded from every mean and counted (``PatchingResult.n_excluded``).
* ``logit_diff`` / ``prob_change``: patched − clean first-token logit / probability.

:func:`get_metric` also takes a user's callable, as TransformerLens' patching functions do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mathcircuits._errors import FixableTypeError, FixableValueError
from mathcircuits.models import Readout, Target

__all__ = [
    "Metric",
    "MetricName",
    "get_metric",
]

#: The metrics read at the last prompt position alone (the ``metric`` choices of ``path_patch`` and
#: ``PatchingConfig``).
LastPositionMetric: TypeAlias = Literal["relative_logit", "logit_diff", "prob_change"]
#: The names of the metrics in :data:`METRICS`.
MetricName: TypeAlias = Literal["answer_logprob", LastPositionMetric]
#: A user's metric: the effect per row from the patched and the clean readout of the same rows.
MetricFn: TypeAlias = Callable[[Readout, Readout], Float[Tensor, " rows"]]
#: The guard of ``relative_logit``: rows whose clean answer logit is at most this are excluded (and counted).
RELATIVE_MIN_CLEAN = 1.0


@dataclass(frozen=True)
class Metric:
    """An effect measure: the change of ``target`` (answer logit or probability), relative or absolute.

    Args:
        target: ``"logit"`` or ``"prob"`` of the first answer token, ``"logprob"`` of the whole answer.
        min_clean: (relative metrics) rows whose clean value is at most this are excluded (None: none).
        fn: a user's ``fn(patched, clean) -> Tensor[rows]`` replacing the built-in change (:data:`MetricFn`);
            ``target`` then says how much is read out (``"logprob"``: everything).
    """

    name: str
    target: Target
    relative: bool = False
    description: str = ""
    min_clean: float | None = None
    fn: MetricFn | None = None

    @classmethod
    def custom(cls, fn: MetricFn, name: str | None = None, target: Target = "logprob") -> Metric:
        """A metric from a user's callable (what :func:`get_metric` does with a callable).

        ``target="logprob"`` (default) reads everything; ``"prob"``/``"logit"`` the last prompt position only.
        """
        if not callable(fn):
            raise FixableTypeError(
                f"metric {fn!r} is not callable. ", "pass fn(patched: Readout, clean: Readout) -> Tensor."
            )
        label = name or getattr(fn, "__name__", "custom")
        return cls(label, target, description=f"user metric {label}", fn=fn)

    @property
    def needs_probs(self) -> bool:
        """Whether the readout needs a softmax over the vocabulary (a probability or a log-probability)."""
        return self.target in ("prob", "logprob")

    @property
    def every_answer_token(self) -> bool:
        """Whether the metric reads every answer token (the logits at every answer position), not the first."""
        return self.target == "logprob"

    def excluded(self, clean: Readout) -> Bool[Tensor, " rows"]:
        """The rows this metric refuses to score: under a relative metric, a clean value ≤ ``min_clean`` (or NaN)."""
        value = clean.value(self.target)
        if not self.relative or self.min_clean is None:
            return torch.zeros(value.shape, dtype=torch.bool, device=value.device)
        return ~(value > self.min_clean)

    def of_change(self, change: Float[Tensor, " rows"], clean: Readout) -> Float[Tensor, " rows"]:
        """The metric for a given patched − clean change of ``target`` (first-order attribution uses it)."""
        if self.fn is not None:
            raise FixableValueError(
                f"metric {self.name!r} is a user's callable, which first-order attribution cannot differentiate "
                "through a change. ",
                "use method='exact' (or 'reference'), or a built-in metric.",
            )
        return change / clean.value(self.target) if self.relative else change

    def __call__(self, patched: Readout, clean: Readout) -> Float[Tensor, " rows"]:
        """The effect of a patch per row, from the patched and clean readouts of the same rows."""
        if self.fn is None:
            return self.of_change(patched.value(self.target) - clean.value(self.target), clean)
        out = self.fn(patched, clean)
        rows = patched.logit.shape[0]
        if not isinstance(out, Tensor) or tuple(out.shape) != (rows,):
            got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise FixableValueError(
                f"metric {self.name!r} returned {got} for {rows} rows. ",
                "return one effect per row, a tensor of shape [rows] (e.g. patched.logprob - clean.logprob).",
            )
        return out


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric(
            "answer_logprob",
            "logprob",
            description="patched − clean log-probability of the whole answer (every token, teacher-forced)",
        ),
        Metric(
            "relative_logit",
            "logit",
            relative=True,
            description=f"(patched − clean) / clean answer logit; clean logit ≤ {RELATIVE_MIN_CLEAN}: row excluded",
            min_clean=RELATIVE_MIN_CLEAN,
        ),
        Metric("logit_diff", "logit", description="patched − clean answer logit"),
        Metric("prob_change", "prob", description="patched − clean answer probability"),
    )
}
LAST_POSITION_METRICS: tuple[str, ...] = tuple(m.name for m in METRICS.values() if not m.every_answer_token)


def answer_readout(
    logits: Float[Tensor, "rows n_answer vocab"],
    answers: Int[Tensor, "rows n_answer"],
    metric: Metric | None = None,
    valid: Int[Tensor, " rows"] | None = None,
) -> Readout:
    """The readout of each row from its logits at the answer positions (teacher-forced).

    Args:
        logits: the logits at the positions that predict ``answers[:, 0]``, ``answers[:, 1]``, ...
            (the last prompt position and each answer token but the last).
        metric: what the readout is for (``None``: logit, probability and log-probability).
        valid: answer tokens per row when answers differ in length (the rest is padding); None: all.
    """
    if logits.shape[:2] != answers.shape:
        raise FixableValueError(
            f"logits {tuple(logits.shape)} and answer tokens {tuple(answers.shape)} do not match: one logit row per "
            "answer token is needed. ",
            "read the logits at the last prompt position and every answer position.",
        )
    answers = answers.to(logits.device)  # a split model's logits are on the unembedding's device
    first = logits[:, 0].gather(-1, answers[:, :1])[:, 0]
    needs = metric is None or metric.needs_probs
    if not needs:
        return Readout(first)
    logp = torch.log_softmax(logits.float(), -1).gather(-1, answers[..., None])[..., 0]  # [rows, n_answer]
    if valid is not None:
        keep = torch.arange(answers.shape[1], device=answers.device)[None] < valid.to(answers.device)[:, None]
        logp = logp * keep
    return Readout(first, logp[:, 0].exp(), logp.sum(-1))


def get_metric(metric: MetricName | Metric | MetricFn) -> Metric:
    """The :class:`Metric` of a name from :data:`METRICS`, ``metric`` itself, or a user's callable wrapped.

    A callable ``fn(patched: Readout, clean: Readout) -> Tensor[rows]`` goes through :meth:`Metric.custom`
    (every answer token read).
    """
    if isinstance(metric, Metric):
        return metric
    if callable(metric):
        return Metric.custom(metric)
    if metric not in METRICS:
        raise FixableValueError(
            f"metric {metric!r} is unknown. ",
            f"use one of {list(METRICS)}, pass a Metric, or a callable "
            "fn(patched: Readout, clean: Readout) -> Tensor[rows].",
        )
    return METRICS[metric]
