"""The HF ``Trainer`` glue of SFT: batch collation, the adapter-aware ``Trainer`` subclass, resume helpers.

``Trainer`` optimises only a :class:`HeadSliceAdapter`'s deltas and saves adapter-only checkpoints; AdamW's
decoupled decay is applied to the *effective* weight, ``Δ ← Δ − lr·wd·(W₀ + Δ)``, by an optimizer pre-step hook.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn
from transformers import Trainer, TrainerCallback

from mathcircuits._files import read_json
from mathcircuits.finetune.adapter import HeadSliceAdapter

__all__: list[str] = []

LOSS_FILE = "loss_sum.json"
"""Saved in each checkpoint: the sum of every optimizer step's training loss so far (for the mean after a resume)."""


def pad_collate(pad_token_id: int, target_logits_only: bool = False):
    """Right-pad ``input_ids`` (with ``pad_token_id``) and ``labels`` (with -100); build ``attention_mask``.

    Right padding keeps absolute positions (GPT-2) equal to an unpadded run. ``target_logits_only=True`` also passes
    ``logits_to_keep`` (a boolean [batch, seq] mask of the positions that predict a target token) and the matching
    flat ``shift_labels`` [n_target], so the model projects onto the vocabulary only where the loss needs it
    (transformers >= 5): same loss, no lm-head forward and backward at prompt positions.
    """

    def collate(features: Sequence[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        n = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), n), pad_token_id, dtype=torch.long, device="cpu")
        labels = torch.full((len(features), n), -100, dtype=torch.long, device="cpu")
        mask = torch.zeros((len(features), n), dtype=torch.long, device="cpu")
        for i, f in enumerate(features):
            k = len(f["input_ids"])
            ids[i, :k] = torch.as_tensor(f["input_ids"])
            labels[i, :k] = torch.as_tensor(f["labels"])
            mask[i, :k] = 1
        batch = {"input_ids": ids, "labels": labels, "attention_mask": mask}
        if target_logits_only:
            shifted = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)  # position t predicts token t+1
            keep = shifted != -100
            batch["logits_to_keep"] = keep
            batch["shift_labels"] = shifted[keep]
        return batch

    return collate


def trainer_classes() -> tuple[type, type]:
    """Build the Trainer subclass lazily (transformers is heavy to import)."""

    class JsonlLog(TrainerCallback):
        def __init__(self, path: Path) -> None:
            self.path = path

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
            if state.is_world_process_zero and logs:
                with open(self.path, "a") as f:
                    f.write(json.dumps({"step": state.global_step, **logs}) + "\n")

    class SFTTrainer(Trainer):
        """``Trainer`` that optimises only the adapter's deltas and saves/loads adapter checkpoints."""

        def __init__(self, *args: Any, decay_mode: str = "weights", **kwargs: Any) -> None:
            self.decay_mode = decay_mode
            self.loss_sum = 0.0  # every optimizer step's loss since step 0, also across a resume
            super().__init__(*args, **kwargs)

        def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
            loss = super().training_step(*args, **kwargs)
            self.loss_sum += float(loss)  # what Trainer adds to its own running loss, kept through checkpoints
            return loss

        def _save_checkpoint(self, model: nn.Module, trial: Any) -> None:
            super()._save_checkpoint(model, trial)
            if self.args.should_save:
                folder = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
                (folder / LOSS_FILE).write_text(json.dumps({"loss_sum": self.loss_sum}))

        def restore_loss_sum(self, checkpoint: str) -> None:
            """The running loss saved with ``checkpoint`` (0 for a checkpoint of an older version)."""
            f = Path(checkpoint) / LOSS_FILE
            self.loss_sum = float(json.loads(f.read_text())["loss_sum"]) if f.is_file() else float("nan")

        def _adapter(self) -> HeadSliceAdapter | None:
            m = self.accelerator.unwrap_model(self.model)
            return m if isinstance(m, HeadSliceAdapter) else None

        def create_optimizer(self, model=None):  # noqa: ANN001
            adapter = self._adapter()
            if adapter is None or self.optimizer is not None:
                return super().create_optimizer(model)
            wd = self.args.weight_decay
            weights = [(s, d) for s, d in adapter.named_deltas() if d.requires_grad and s.kind == "weight"]
            biases = [d for s, d in adapter.named_deltas() if d.requires_grad and s.kind == "bias"]
            groups = [
                {"params": [d for _, d in weights], "weight_decay": wd if self.decay_mode == "delta" else 0.0},
                {"params": biases, "weight_decay": 0.0},
            ]
            groups = [g for g in groups if g["params"]]
            cls, kwargs = self.get_optimizer_cls_and_kwargs(self.args, adapter)
            self.optimizer = cls(groups, **kwargs)
            if self.decay_mode == "weights" and wd > 0 and weights:
                self.optimizer.register_step_pre_hook(effective_decay_hook(adapter, weights, wd))
            return self.optimizer

        def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
            adapter = self._adapter()
            if adapter is None:
                return super()._save(output_dir, state_dict)
            if not self.args.should_save:
                return None
            output_dir = output_dir or self.args.output_dir
            adapter.save_pretrained(output_dir)
            if self.processing_class is not None:
                self.processing_class.save_pretrained(output_dir)
            return None

        def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
            adapter = self._adapter()
            if adapter is None:
                return super()._load_from_checkpoint(resume_from_checkpoint, model)
            adapter.load_weights(resume_from_checkpoint)
            return None

    return SFTTrainer, JsonlLog


def effective_decay_hook(adapter: HeadSliceAdapter, weights: list, wd: float):
    """Optimizer pre-step hook: AdamW's decoupled decay of the *effective* weight, ``Δ -= lr·wd·(W₀ + Δ)``."""

    def hook(optimizer, args, kwargs):  # noqa: ANN001
        lr = optimizer.param_groups[0]["lr"]
        with torch.no_grad():
            for s, d in weights:
                if d.grad is not None:  # AdamW also skips parameters without a gradient
                    d.sub_(lr * wd * (adapter.base_values(s.name).to(d.dtype) + d))

    return hook


def _log_line_step(line: str) -> float:
    """The step of a log.jsonl line; +inf for a run summary or a line cut short by a kill (both dropped)."""
    try:
        entry = json.loads(line)
    except json.JSONDecodeError:
        return float("inf")
    return float("inf") if "train_runtime" in entry else float(entry.get("step", 0))


def prepare_resume(output_dir: Path, checkpoint: str | bool | None, max_steps: int) -> int | None:
    """Before resuming: drop the killed run's log lines after the checkpoint; return its step if it is final.

    The step is returned when ``max_steps`` > 0 and the checkpoint already reached it (nothing left to train).
    """
    if checkpoint in (None, False):
        return None
    state = read_json(Path(str(checkpoint)) / "trainer_state.json")
    step = int(state["global_step"])
    log_file = output_dir / "log.jsonl"
    if log_file.exists():
        kept = [line for line in log_file.read_text().splitlines() if _log_line_step(line) <= step]
        log_file.write_text("".join(f"{line}\n" for line in kept))
    return step if 0 < max_steps <= step else None
