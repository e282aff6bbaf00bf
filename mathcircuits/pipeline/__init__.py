"""The pipeline: a typed run configuration, one registry of stages, and a resumable, locked run folder.

Stages live in ``pipeline/stages/<name>.py``, named as the CLI names them; see
``docs/architecture.md``.
"""

from mathcircuits.pipeline.compare_models import check_same_config, compare_model_runs, load_run_results
from mathcircuits.pipeline.config import (
    ConfigError,
    FinetuneSection,
    ModelSection,
    RunConfig,
    fingerprint,
    render_config,
)
from mathcircuits.pipeline.context import Context, StageSummary, select_pairs
from mathcircuits.pipeline.lock import RunLock, RunLockedError
from mathcircuits.pipeline.paths import RunPaths
from mathcircuits.pipeline.run import RunFolderError, check_run_folder, done_summary, run_pipeline, stage_status
from mathcircuits.pipeline.stages import STAGES, Stage

__all__ = [
    "STAGES",
    "ConfigError",
    "ModelSection",
    "Context",
    "FinetuneSection",
    "RunConfig",
    "RunFolderError",
    "RunLock",
    "RunLockedError",
    "RunPaths",
    "Stage",
    "StageSummary",
    "check_run_folder",
    "check_same_config",
    "compare_model_runs",
    "done_summary",
    "fingerprint",
    "load_run_results",
    "render_config",
    "run_pipeline",
    "select_pairs",
    "stage_status",
]
