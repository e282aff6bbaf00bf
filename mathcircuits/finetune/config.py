"""Settings of one SFT run: :class:`SFTConfig`, with the paper's values as defaults.

Zhang et al. (ICML 2024, §5): learning rate 2e-5, batch 128 (``micro_batch_size`` × gradient accumulation ×
devices), 2 epochs, linear warm-up over 2% of the steps, weight decay 0.1, and the gradient of a layer's tuned
heads rescaled by ``H/h`` (``H`` heads in the layer, ``h`` of them tuned).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from mathcircuits._codec import Encoded
from mathcircuits._errors import FixableValueError
from mathcircuits._schema import check_fields, setting
from mathcircuits._schema import from_dict as config_from_dict
from mathcircuits.finetune.modes import SFTMethod
from mathcircuits.finetune.slices import KV_POLICIES, KVPolicy

__all__ = [
    "SFTConfig",
]

#: the transformers schedulers that need no settings beyond warm-up and steps (a free string failed only in
#: the finetune or compare stage, after earlier stages had written)
LRScheduler = Literal[
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup", "inverse_sqrt"
]


@dataclass(frozen=True)
class SFTConfig:
    """Settings of one SFT run (paper defaults). ``mode="full"`` is the full-SFT baseline."""

    mode: SFTMethod = setting(
        "precise", "precise: key components only; full: every parameter; lora: PEFT LoRA on the attention projections"
    )
    learning_rate: float = setting(2e-5, "peak learning rate (the paper's value)", gt=0)
    batch_size: int = setting(128, "effective batch: micro_batch_size x accumulation x devices", ge=1)
    micro_batch_size: int = setting(8, "examples per forward pass and device", ge=1)
    epochs: float = setting(2.0, "passes over the training data (when max_steps is -1)", gt=0)
    max_steps: int = setting(-1, "optimizer steps; -1: train for `epochs` instead", ge=-1)
    warmup_ratio: float = setting(0.02, "fraction of the steps with a linear warm-up", ge=0, lt=1)
    weight_decay: float = setting(0.1, "AdamW decoupled weight decay", ge=0)
    decay_mode: Literal["weights", "delta"] = setting(
        "weights", "weights: decay the effective tuned weights; delta: decay the change towards the base"
    )
    lr_scheduler: LRScheduler = setting("linear", "transformers learning-rate scheduler")
    max_grad_norm: float = setting(1.0, "gradient clipping (global norm)", gt=0)
    grad_scale: bool = setting(True, "rescale a layer's tuned heads' gradient by H/h (precise only)")
    target_logits_only: bool = setting(True, "vocabulary logits only at target positions (same loss, faster)")
    kv_policy: KVPolicy = setting("group", "shared K/V under GQA: group (tune the group) | exclusive | frozen")
    include_mlps: bool = setting(True, "also tune the key MLPs (precise)")
    lora_rank: int = setting(8, "LoRA rank (lora mode; see finetune.lora_rank_for_budget)", ge=1)
    lora_alpha: float = setting(16.0, "LoRA scaling numerator alpha (update scaled by alpha/rank)", gt=0)
    seed: int = setting(0, "training seed (data order, init)")
    logging_steps: int = setting(10, "log the loss every N steps", ge=1)
    save_steps: int = setting(0, "checkpoint every N steps so an interrupted run resumes; 0: none", ge=0)
    save_total_limit: int | None = setting(2, "checkpoints kept; null: all", ge=1)
    save_final: bool = setting(True, "write <output_dir>/final at the end")
    progress_bar: bool = setting(True, "show the training progress bar")
    bf16: bool = setting(False, "train in bfloat16 mixed precision")
    dataloader_num_workers: int = setting(0, "data loader worker processes", ge=0)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.kv_policy not in KV_POLICIES:  # check_fields checked the Literal; this names the table it comes from
            raise FixableValueError(f"kv_policy={self.kv_policy!r}. ", f"use one of {KV_POLICIES}.")
        if self.max_steps == 0:
            raise FixableValueError(
                "max_steps=0 trains nothing. ", "give a positive number of steps, or -1 to use epochs."
            )
        if self.batch_size % self.micro_batch_size:
            raise FixableValueError(
                f"batch_size={self.batch_size} must be a positive multiple of "
                f"micro_batch_size={self.micro_batch_size}. ",
                "make batch_size a multiple of micro_batch_size.",
            )

    def accumulation_steps(self, world_size: int = 1) -> int:
        per_step = self.micro_batch_size * world_size
        if self.batch_size % per_step:
            raise FixableValueError(
                f"batch_size={self.batch_size} is not a multiple of micro_batch_size × devices = {per_step}. ",
                "choose batch_size, micro_batch_size and the number of devices so that it divides.",
            )
        return self.batch_size // per_step

    def to_dict(self) -> Encoded:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Encoded) -> "SFTConfig":
        """Build from a mapping (lists are accepted for tuples); unknown keys are an error."""
        return config_from_dict(cls, d)
