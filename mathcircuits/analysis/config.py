"""Settings of the analysis of key heads and MLPs (attention by token role, MLP probes, figures).

The ``analysis`` section of a run configuration (the report stage reads ``static_formats``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mathcircuits._schema import check_fields, setting

__all__: list[str] = []


@dataclass(frozen=True)
class AnalysisConfig:
    """What the analyze and report stages look at and write."""

    max_pairs: int = setting(
        32, "correct pairs analysed", ge=1, le=100_000, why="each pair is one forward pass with the attention cached"
    )
    probe_prompt: str | None = setting(None, "prompt of the MLP probe case study; null: the first correct addition")
    circuitsvis_prompts: int = setting(2, "prompts in the interactive attention view", ge=0)
    static_formats: tuple[Literal["png", "svg", "pdf"], ...] = setting(
        ("png",), "static figure formats besides HTML (need a Chromium); empty: HTML only"
    )

    def __post_init__(self) -> None:
        check_fields(self)
