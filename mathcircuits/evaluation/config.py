"""Settings of the evaluation of base and fine-tuned models (held-out arithmetic and benchmarks).

The ``evaluation`` section of a run configuration; its fields go unchanged to
:func:`~mathcircuits.evaluation.evaluate_model`.
"""

from __future__ import annotations

from dataclasses import dataclass

from mathcircuits._schema import ConfigError, check_fields, setting
from mathcircuits.evaluation.benchmarks import BENCHMARKS, benchmark_spec

__all__: list[str] = []


@dataclass(frozen=True)
class EvaluationConfig:
    """Base vs tuned models, Table-1 style (paper §5)."""

    enabled: bool = setting(True, "run the evaluate stage")
    heldout_pairs_per_template: int = setting(8, "held-out arithmetic pairs per template (never trained on)", ge=1)
    benchmarks: tuple[str, ...] = setting(("AddSub", "SingleEq", "ARC-Easy"), "benchmark names; empty: none")
    limit: int = setting(20, "items per benchmark", ge=1)
    n_shot: int = setting(2, "few-shot examples per benchmark prompt", ge=0)
    max_new_tokens: int = setting(96, "generation budget per answer", ge=1)
    root: str | None = setting(None, "benchmark folder; null: $MATHCIRCUITS_BENCHMARKS or the default")

    def __post_init__(self) -> None:
        check_fields(self)
        unknown = []
        for name in self.benchmarks:
            try:
                benchmark_spec(name)
            except KeyError:
                unknown.append(name)
        if unknown:
            raise ConfigError(
                f"evaluation.benchmarks has {unknown}, which are not known benchmarks. ",
                f"use some of {sorted(BENCHMARKS)} (or an empty list for none).",
            )
