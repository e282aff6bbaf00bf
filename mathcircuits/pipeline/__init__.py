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
    from mathcircuits.pipeline.compare_models import check_same_config, compare_model_runs, load_run_results
    from mathcircuits.pipeline.config import (
        LATER_SETTINGS,
        READ_ONLY_WHEN,
        ConfigError,
        LaterSetting,
        ReadOnlyWhen,
        RunConfig,
        fingerprint,
        fingerprinted,
        multi_digit_template,
        render_config,
    )
    from mathcircuits.pipeline.context import Context, StageSummary, select_pairs, template_spread
    from mathcircuits.pipeline.facts import (
        FACT_STAGES,
        FactStage,
        FactUse,
        fact_use,
        stage_facts,
        stage_rows,
        tag_fact_stages,
    )
    from mathcircuits.pipeline.lock import RunLock, RunLockedError
    from mathcircuits.pipeline.memory import MemoryHow, MemoryMeter, PeakMemory, cuda_devices
    from mathcircuits.pipeline.paths import RunPaths
    from mathcircuits.pipeline.plugins import StudyError, register_study, unregister_study
    from mathcircuits.pipeline.reader import ResultReader
    from mathcircuits.pipeline.registry import all_studies, stages
    from mathcircuits.pipeline.run import (
        RunFolderError,
        check_run_folder,
        done_summary,
        is_input_error,
        run_pipeline,
        stage_status,
    )
    from mathcircuits.pipeline.sections import FinetuneSection, ModelSection
    from mathcircuits.pipeline.studies.shared import IdentifySummary, OperationTotal
    from mathcircuits.pipeline.study import Contribution, Study, StudyCode

#: public name → the module that defines it (imported on first use).
_WHERE = {
    **dict.fromkeys(("check_same_config", "compare_model_runs", "load_run_results"), "compare_models"),
    **dict.fromkeys(
        (
            "LATER_SETTINGS",
            "READ_ONLY_WHEN",
            "ConfigError",
            "LaterSetting",
            "ReadOnlyWhen",
            "RunConfig",
            "fingerprint",
            "fingerprinted",
            "multi_digit_template",
            "render_config",
        ),
        "config",
    ),
    **dict.fromkeys(("Context", "StageSummary", "select_pairs", "template_spread"), "context"),
    **dict.fromkeys(
        ("FACT_STAGES", "FactStage", "FactUse", "fact_use", "stage_facts", "stage_rows", "tag_fact_stages"), "facts"
    ),
    **dict.fromkeys(("RunLock", "RunLockedError"), "lock"),
    **dict.fromkeys(("MemoryHow", "MemoryMeter", "PeakMemory", "cuda_devices"), "memory"),
    "RunPaths": "paths",
    **dict.fromkeys(("FinetuneSection", "ModelSection"), "sections"),
    **dict.fromkeys(
        ("RunFolderError", "check_run_folder", "done_summary", "is_input_error", "run_pipeline", "stage_status"), "run"
    ),
    **dict.fromkeys(("StudyError", "register_study", "unregister_study"), "plugins"),
    "ResultReader": "reader",
    **dict.fromkeys(("all_studies", "stages"), "registry"),
    **dict.fromkeys(("Contribution", "Study", "StudyCode"), "study"),
    **dict.fromkeys(("IdentifySummary", "OperationTotal"), "studies.shared"),
}

__all__ = [
    "FACT_STAGES",
    "LATER_SETTINGS",
    "READ_ONLY_WHEN",
    "ConfigError",
    "Contribution",
    "LaterSetting",
    "ReadOnlyWhen",
    "ModelSection",
    "Context",
    "FactStage",
    "FactUse",
    "FinetuneSection",
    "IdentifySummary",
    "MemoryHow",
    "MemoryMeter",
    "PeakMemory",
    "OperationTotal",
    "RunConfig",
    "RunFolderError",
    "RunLock",
    "RunLockedError",
    "ResultReader",
    "RunPaths",
    "StageSummary",
    "Study",
    "StudyCode",
    "StudyError",
    "check_run_folder",
    "cuda_devices",
    "check_same_config",
    "compare_model_runs",
    "done_summary",
    "fact_use",
    "fingerprint",
    "fingerprinted",
    "is_input_error",
    "load_run_results",
    "multi_digit_template",
    "render_config",
    "run_pipeline",
    "select_pairs",
    "stage_facts",
    "stage_rows",
    "stage_status",
    "tag_fact_stages",
    "stages",
    "all_studies",
    "template_spread",
    "register_study",
    "unregister_study",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'mathcircuits.pipeline' has no attribute {name!r}")
    value = exported(getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name))  # arguments checked
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
