"""What a patch is measured by: the answer's readout and the metrics, as values.

A :class:`~mathcircuits.models.Readout` holds the correct answer's raw logit (and, when a metric
needs it, its probability) at the patched position, one value per row. A
:class:`Metric` turns a patched and a clean readout into an effect; the three
the toolkit knows are registered in :data:`METRICS` by name:

* ``relative_logit``: (patched − clean) / clean of the raw answer logit, the
  paper's measure (Zhang et al. 2024, Eq. 2);
* ``logit_diff``: patched − clean answer logit;
* ``prob_change``: patched − clean answer probability.

Every method calls the same metric object; attribution, which estimates the
*change* of the target quantity to first order, uses :meth:`Metric.of_change`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from jaxtyping import Float
from torch import Tensor

from mathcircuits.models.readout import Readout

__all__ = ["METRICS", "Metric", "MetricName", "get_metric"]

#: The names of the metrics in :data:`METRICS` (the ``metric`` choices of ``path_patch`` and ``PatchingConfig``).
MetricName: TypeAlias = Literal["relative_logit", "logit_diff", "prob_change"]


@dataclass(frozen=True)
class Metric:
    """An effect measure: the change of ``target`` (answer logit or probability), relative or absolute.

    Args:
        name: the name results are saved under.
        target: which quantity of the readout changes (``"logit"`` or ``"prob"``).
        relative: divide the change by the clean value (the paper's relative logit change).
        description: one line for docs and reports.
    """

    name: str
    target: Literal["logit", "prob"]
    relative: bool = False
    description: str = ""

    @property
    def needs_probs(self) -> bool:
        return self.target == "prob"

    def of_change(self, change: Float[Tensor, " rows"], clean: Readout) -> Float[Tensor, " rows"]:
        """The metric for a given change of the target quantity (used by first-order attribution).

        Args:
            change: patched − clean value of ``target``, one per row.
            clean: the clean readout of the same rows.

        Returns:
            The effect per row.
        """
        return change / clean.value(self.target) if self.relative else change

    def __call__(self, patched: Readout, clean: Readout) -> Float[Tensor, " rows"]:
        """The effect of a patch per row, from the patched and clean readouts of the same rows."""
        return self.of_change(patched.value(self.target) - clean.value(self.target), clean)


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("relative_logit", "logit", relative=True, description="(patched − clean) / clean answer logit"),
        Metric("logit_diff", "logit", description="patched − clean answer logit"),
        Metric("prob_change", "prob", description="patched − clean answer probability"),
    )
}


def get_metric(metric: MetricName | Metric) -> Metric:
    """The :class:`Metric` of a name from :data:`METRICS`, or ``metric`` itself.

    Args:
        metric: A metric name (a key of :data:`METRICS`) or a :class:`Metric`.

    Returns:
        The metric to score patched runs with.

    Raises:
        ValueError: the name is unknown.
    """
    if isinstance(metric, Metric):
        return metric
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r} is unknown. Fix: use one of {list(METRICS)} or pass a Metric.")
    return METRICS[metric]
