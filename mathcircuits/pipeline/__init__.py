"""The pipeline: a typed run configuration, one registry of studies, and a resumable, locked run folder.

Each study is one folder, ``pipeline/studies/<name>/``, named as the CLI names it, with one :class:`Study` record;
a study from outside the package joins through :func:`register_study` or an entry point (see
``docs/howto/add-a-study.md`` and ``docs/architecture.md``). The names below load on first use, so the CLI can
read the registry (:func:`stages`) and parse its arguments without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mathcircuits._checks import exported

if TYPE_CHECKING:
    from mathcircuits._schema import setting
    from mathcircuits.pipeline.config import (
        LATER_SETTINGS,
        READ_ONLY_WHEN,
        ConfigError,
        LaterSetting,
        ReadOnlyWhen,
        RunConfig,
        fingerprinted,
    )
    from mathcircuits.pipeline.context import Context, StageSummary, select_pairs
    from mathcircuits.pipeline.facts import FactUse
    from mathcircuits.pipeline.lock import RunLockedError
    from mathcircuits.pipeline.memory import MemoryHow, MemoryMeter, PeakMemory
    from mathcircuits.pipeline.paths import RunPaths
    from mathcircuits.pipeline.plugins import StudyError, register_study, unregister_study
    from mathcircuits.pipeline.reader import ResultReader
    from mathcircuits.pipeline.registry import all_studies, stages
    from mathcircuits.pipeline.run import RunFolderError, done_summary, run_pipeline, stage_status
    from mathcircuits.pipeline.sections import FinetuneSection, ModelSection
    from mathcircuits.pipeline.studies.shared import IdentifySummary, OperationTotal
    from mathcircuits.pipeline.study import Contribution, Study, StudyCode

#: public name → the module that defines it (imported on first use).
_WHERE = {
    "setting": "_setting",
    **dict.fromkeys(
        (
            "LATER_SETTINGS",
            "READ_ONLY_WHEN",
            "ConfigError",
            "LaterSetting",
            "ReadOnlyWhen",
            "RunConfig",
            "fingerprinted",
        ),
        "config",
    ),
    **dict.fromkeys(("Context", "StageSummary", "select_pairs"), "context"),
    "FactUse": "facts",
    "RunLockedError": "lock",
    **dict.fromkeys(("MemoryHow", "MemoryMeter", "PeakMemory"), "memory"),
    "RunPaths": "paths",
    **dict.fromkeys(("StudyError", "register_study", "unregister_study"), "plugins"),
    "ResultReader": "reader",
    **dict.fromkeys(("all_studies", "stages"), "registry"),
    **dict.fromkeys(("RunFolderError", "done_summary", "run_pipeline", "stage_status"), "run"),
    **dict.fromkeys(("FinetuneSection", "ModelSection"), "sections"),
    **dict.fromkeys(("IdentifySummary", "OperationTotal"), "studies.shared"),
    **dict.fromkeys(("Contribution", "Study", "StudyCode"), "study"),
}

__all__ = [
    "LATER_SETTINGS",
    "READ_ONLY_WHEN",
    "ConfigError",
    "Context",
    "Contribution",
    "FactUse",
    "FinetuneSection",
    "IdentifySummary",
    "LaterSetting",
    "MemoryHow",
    "MemoryMeter",
    "ModelSection",
    "OperationTotal",
    "PeakMemory",
    "ReadOnlyWhen",
    "ResultReader",
    "RunConfig",
    "RunFolderError",
    "RunLockedError",
    "RunPaths",
    "StageSummary",
    "Study",
    "StudyCode",
    "StudyError",
    "all_studies",
    "done_summary",
    "fingerprinted",
    "register_study",
    "run_pipeline",
    "select_pairs",
    "stage_status",
    "stages",
    "setting",
    "unregister_study",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'mathcircuits.pipeline' has no attribute {name!r}")
    where = "mathcircuits._schema" if _WHERE[name] == "_setting" else f"{__name__}.{_WHERE[name]}"
    value = exported(getattr(importlib.import_module(where), name))  # arguments checked
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
