"""Stage 9 — pipeline: a run configuration and a resumable run directory."""

from mathcircuits.pipeline.config import ConfigError, RunConfig, fingerprint
from mathcircuits.pipeline.run import STAGES, run_pipeline, stage_status

__all__ = ["ConfigError", "RunConfig", "STAGES", "fingerprint", "run_pipeline", "stage_status"]
