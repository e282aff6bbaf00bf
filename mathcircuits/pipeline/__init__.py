"""The pipeline: a typed run configuration, one registry of stages, and a resumable, locked run folder.

Stages live in ``pipeline/stages/<name>.py``, named as the CLI names them; see
``docs/architecture.md``. The names below load on first use, so the CLI can read the stage registry
(:data:`STAGES`) and parse its arguments without importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mathcircuits.pipeline.config import ConfigError, RunConfig
    from mathcircuits.pipeline.context import StageSummary, select_pairs
    from mathcircuits.pipeline.facts import FactUse
    from mathcircuits.pipeline.lock import RunLockedError
    from mathcircuits.pipeline.memory import MemoryHow, MemoryMeter, PeakMemory
    from mathcircuits.pipeline.paths import RunPaths
    from mathcircuits.pipeline.run import RunFolderError, run_pipeline
    from mathcircuits.pipeline.sections import FinetuneSection, ModelSection
    from mathcircuits.pipeline.stages import STAGES, Stage

#: public name → the module that defines it (imported on first use).
_WHERE = {
    **dict.fromkeys(("check_same_config", "compare_model_runs", "load_run_results"), "compare_models"),
    **dict.fromkeys(("ConfigError", "RunConfig", "fingerprint", "render_config"), "config"),
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
    "STAGES",
    "ConfigError",
    "ModelSection",
    "FactUse",
    "FinetuneSection",
    "IdentifySummary",
    "MemoryHow",
    "MemoryMeter",
    "PeakMemory",
    "OperationTotal",
    "RunConfig",
    "RunFolderError",
    "RunLockedError",
    "RunPaths",
    "Stage",
    "StageSummary",
    "run_pipeline",
    "select_pairs",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'mathcircuits.pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
