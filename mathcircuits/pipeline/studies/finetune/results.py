"""The finetune study's code; what it trained is reported by the evaluate and compare studies that score it."""

from __future__ import annotations

from mathcircuits.pipeline.studies.finetune.stage import FinetuneSummary, run
from mathcircuits.pipeline.study import StudyCode

__all__: list[str] = []

CODE = StudyCode(run=run, summary=FinetuneSummary)
