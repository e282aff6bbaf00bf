"""Settings of the validation of key heads: knockout (three ablations) and transfer to other data.

The ``validation`` section of a run configuration; its fields go unchanged to
:func:`~mathcircuits.ablation.knockout_curve` and :func:`~mathcircuits.ablation.transfer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mathcircuits._errors import FixableValueError
from mathcircuits._schema import check_fields, setting
from mathcircuits.data.benchmark_files import WORD_PROBLEM_SETS

__all__: list[str] = []


@dataclass(frozen=True)
class ValidationConfig:
    """Knockout curves (key vs random heads) and transfer sets (paper §4); each field's help says what it does."""

    knockout_max_k: int = setting(10, "knock out the top 1..K heads", ge=1)
    knockout_ks: tuple[int, ...] = setting(
        (),
        "k values of the knockout curve (each costs 1 + n_random scorings); empty: every k in 1..K. validate adds "
        "k = the number of key heads (the point claim C2 reads)",
    )
    n_random: int = setting(
        3,
        "random head orders per K, drawn from all heads as in the paper's figure (the control)",
        ge=1,
        le=1000,
        why="each random order is one more knockout scoring per k",
    )
    control_draws: int = setting(
        100,
        "depth-matched random non-key sets beside the key set (C2's null)",
        ge=1,
        le=100_000,
        why="each draw is one more scoring of every pair",
    )
    control_pairs: int = setting(
        24,
        "fresh pairs per operation scored by every control draw (C2, C4)",
        ge=1,
        le=100_000,
        why="every pair is generated and scored by every draw",
    )
    margin_draws: int = setting(
        100,
        "of the control's random sets, how many C4's MLP margin also scores",
        ge=1,
        le=100_000,
        why="each draw is one more scoring of every pair",
    )
    transfer_draws: int = setting(
        100,
        "depth-matched random non-key sets per transfer set (C5's null)",
        ge=1,
        le=100_000,
        why="each draw is one more scoring of every pair",
    )
    sequential: bool = setting(
        True, "stop a random-set comparison (C2, C4, C5) once p >= 0.5 is certain (Besag-Clifford; p and floor kept)"
    )
    ablation: Literal["mean", "position_mean", "resample"] = setting(
        "position_mean",
        "knocked-out head's value: mean over all positions, per-position mean, or resampled "
        "(docs/howto/knock-out-a-circuit.md); transfer sets without counterfactual prompts use mean",
    )
    scope: Literal["all", "last"] = setting("all", "positions ablated: all, or the last token only")
    max_pairs: int = setting(
        32,
        "correct pairs per operation and per transfer set; fresh: after the patching.max_pairs identify used",
        ge=1,
        le=100_000,
        why="every pair is generated, scored and knocked out",
    )
    transfer_held_in: bool = setting(
        True,
        "also score the identification data as transfer sets (the same heads' reference; not evidence of C5; 7 "
        "scorings per operation)",
    )
    transfer_templates: bool = setting(True, "transfer to the time-span / accumulation word templates")
    transfer_multi_digit: bool = setting(True, "transfer to two-digit operands")
    word_problem_sets: tuple[str, ...] = setting(("SVAMP", "AddSub", "SingleEq"), "benchmark word-problem sets")
    word_problem_root: str | None = setting(None, "benchmark folder; null: $MATHCIRCUITS_BENCHMARKS or the default")
    word_problem_limit: int = setting(48, "items per word-problem set", ge=1)

    def __post_init__(self) -> None:
        check_fields(self)
        unknown = [n for n in self.word_problem_sets if n not in WORD_PROBLEM_SETS]
        if unknown:
            raise FixableValueError(
                f"validation.word_problem_sets has {unknown}, which are not word-problem sets. ",
                f"use some of {list(WORD_PROBLEM_SETS)} (folder names under the benchmark folder).",
            )
        bad = [k for k in self.knockout_ks if not 1 <= k <= self.knockout_max_k]
        if bad:
            raise FixableValueError(
                f"validation.knockout_ks has {bad}, outside 1..knockout_max_k ({self.knockout_max_k}). ",
                "list k values in that range, or leave it empty for every k.",
            )
