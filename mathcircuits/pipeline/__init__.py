"""The pipeline: a typed run configuration, one registry of stages, and a resumable, locked run folder.

Stages live in ``pipeline/stages/<name>.py``, named as the CLI names them; see
``docs/architecture.md``. The names below load on first use, so the CLI can read the stage registry
(:data:`STAGES`) and parse its arguments without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
    from mathcircuits.pipeline.preflight import multi_digit_template
    from mathcircuits.pipeline.run import (
        RunFolderError,
        check_run_folder,
        done_summary,
        is_input_error,
        run_pipeline,
        stage_status,
    )
    from mathcircuits.pipeline.sections import FinetuneSection, ModelSection
    from mathcircuits.pipeline.stages import STAGES, Stage

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
    "multi_digit_template": "preflight",
    **dict.fromkeys(
        ("RunFolderError", "check_run_folder", "done_summary", "is_input_error", "run_pipeline", "stage_status"), "run"
    ),
    **dict.fromkeys(("STAGES", "Stage"), "stages"),
    **dict.fromkeys(("IdentifySummary", "OperationTotal"), "stages.identify"),
}

__all__ = [
    "FACT_STAGES",
    "LATER_SETTINGS",
    "READ_ONLY_WHEN",
    "STAGES",
    "ConfigError",
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
    "RunPaths",
    "Stage",
    "StageSummary",
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
    "template_spread",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'mathcircuits.pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
