"""What a patch is measured by: the answer's readout and the metrics, as values.

A :class:`~mathcircuits.models.Readout` holds the correct answer's raw logit (and, when a metric
needs it, its probability, or the log-probability of the whole answer) at the
patched position, one value per row. A :class:`Metric` turns a patched and a
clean readout into an effect; the four the toolkit knows are registered in
:data:`METRICS` by name:

* ``answer_logprob`` (the default of path patching and of the circuit functions): patched − clean
  log-probability of the **whole answer**, teacher-forced over every answer token (SmolLM2 writes
  "12" as "1", "2")::

      log p(answer) = Σ_j log softmax(logits[t_j])[answer_j],   t_j = last prompt position + j

  Offset-free (log-softmax ignores a constant added to every logit) and the same target as the
  knockout, which scores the whole answer. It needs the logits at every answer position, so the
  sequence is the prompt followed by the answer's tokens but the last (:func:`answer_readout`);
  path patching then patches the sender at every readout position (attention is frozen, so each
  position's change stays at that position: more readout rows, not more forward passes).
* ``relative_logit``: (patched − clean) / clean of the raw answer logit of the answer's first
  token, the paper's measure (Zhang et al. 2024, Eq. 2). Raw logits carry an offset that softmax
  ignores, so this ratio depends on it, and it is only meaningful for a clearly positive clean
  logit. **Guard**: a row whose clean logit is ≤ :data:`RELATIVE_MIN_CLEAN` (negative, zero or near
  zero: the ratio flips sign or explodes) is excluded from every mean and counted
  (``PatchingResult.n_excluded``, with a warning in the log and the identify summary);
* ``logit_diff``: patched − clean answer logit (first token);
* ``prob_change``: patched − clean answer probability (first token).

A user's own measure: :func:`get_metric` (and so :func:`~mathcircuits.patching.path_patch`) also
takes a callable ``fn(patched: Readout, clean: Readout) -> Tensor[rows]``, as TransformerLens'
patching functions take a metric callable; its readouts carry every quantity (first-token logit and
probability, whole-answer log-probability), and it must return one effect per row.

Every method calls the same metric object; attribution, which estimates the
*change* of the target quantity to first order, uses :meth:`Metric.of_change`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mathcircuits._errors import FixableTypeError, FixableValueError
from mathcircuits.models.forward.readout import Readout, Target

__all__ = [
    "LAST_POSITION_METRICS",
    "METRICS",
    "RELATIVE_MIN_CLEAN",
    "LastPositionMetric",
    "Metric",
    "MetricFn",
    "MetricName",
    "answer_readout",
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
        name: the name results are saved under.
        target: which quantity of the readout changes (``"logit"`` or ``"prob"`` of the first answer token,
            ``"logprob"`` of the whole answer).
        relative: divide the change by the clean value (the paper's relative logit change).
        description: one line for docs and reports.
        min_clean: (relative metrics) rows whose clean value is at most this are excluded by :meth:`excluded`
            (None: no row is).
        fn: a user's callable ``fn(patched, clean) -> Tensor[rows]`` that replaces the built-in change
            (:data:`MetricFn`); ``target`` then says how much is read out (``"logprob"``: everything).
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

        Args:
            fn: ``fn(patched: Readout, clean: Readout) -> Tensor[rows]``; the effect of each row.
            name: the name results are saved under (default: the callable's ``__name__``).
            target: what the readouts hold: ``"logprob"`` (default; every answer token is read, so the readouts
                have the first token's logit and probability and the whole answer's log-probability),
                ``"prob"`` or ``"logit"`` (the last prompt position only, cheaper).

        Returns:
            The :class:`Metric`.
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
        """The metric for a given change of the target quantity (used by first-order attribution).

        Args:
            change: patched − clean value of ``target``, one per row.
            clean: the clean readout of the same rows.

        Returns:
            The effect per row.
        """
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
        logits: the logits at the last prompt position and at each answer token but the last, i.e. at the
            positions that predict ``answers[:, 0]``, ``answers[:, 1]``, ...
        answers: the answer's tokens.
        metric: what the readout is for (``None``: everything: logit, probability and log-probability).
        valid: the number of answer tokens of each row when rows of one batch have answers of different
            lengths (the rest of ``answers`` is padding); None: every row uses all ``n_answer`` tokens.

    Returns:
        The :class:`Readout`: the first token's logit (and probability), the whole answer's log-probability.
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

    Args:
        metric: A metric name (a key of :data:`METRICS`), a :class:`Metric`, or a callable
            ``fn(patched: Readout, clean: Readout) -> Tensor[rows]`` (:meth:`Metric.custom`, every answer token read).

    Returns:
        The metric to score patched runs with.

    Raises:
        ValueError: the name is unknown.
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
