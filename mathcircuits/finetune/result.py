"""What one SFT run did: :class:`SFTResult` (settings, tuned-parameter counts, loss history, speed)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from mathcircuits._io import SavedResult
from mathcircuits.finetune.config import SFTConfig
from mathcircuits.finetune.modes import SFTMethod
from mathcircuits.finetune.sliceset import SliceSet
from mathcircuits.models import ModelSpec

__all__ = ["SFTResult"]


@dataclass(frozen=True, repr=False)
class SFTResult(SavedResult):
    """What one SFT run did: settings, tuned-parameter counts, loss history and speed.

    ``slices`` is None for LoRA and full SFT.
    """

    STAGE = "finetune"
    VERSION = 3

    mode: SFTMethod
    config: SFTConfig
    model: ModelSpec
    n_trainable: int
    n_model_params: int
    global_step: int
    train_loss: float
    loss_history: tuple[tuple[int, float], ...]
    runtime_s: float
    samples_per_second: float
    output_dir: str
    resumed_from: str | None = None
    slices: SliceSet | None = None  # the tuned slices of precise SFT

    def to_dataframe(self) -> pd.DataFrame:

        return pd.DataFrame(list(self.loss_history), columns=["step", "loss"])

    def summary_items(self) -> list[tuple[str, str]]:
        """Method, model, steps, loss and tuned parameters."""
        return [
            ("mode", self.mode),
            ("model", self.model.name),
            ("steps", str(self.global_step)),
            ("train loss", f"{self.train_loss:.4g}"),
            ("tuned params", f"{self.n_trainable:,}"),
        ]
