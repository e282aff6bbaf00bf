"""Train one SFT run through HF ``Trainer``: precise SFT (key components only), LoRA or full SFT.

Every method (its strategy in :data:`~mathcircuits.finetune.methods.METHODS`) runs the same way, with the paper's
settings
as :class:`~mathcircuits.finetune.SFTConfig`'s defaults. Notes on faithfulness:

* **Weight decay.** With ``decay_mode="weights"`` (default) the tuned entries decay as in full SFT: AdamW's
  ``W ← W − lr·wd·W`` on the effective weight ``W = W₀ + Δ`` becomes ``Δ ← Δ − lr·wd·(W₀ + Δ)`` (biases are not
  decayed, as in ``Trainer``). ``"delta"`` decays Δ towards zero (the pre-trained weights). Either way the frozen
  base is never in the optimizer.
* **Gradient rescaling.** Adam normalises gradients per entry, so a constant factor ``H/h`` cancels in the update
  except through ε and gradient clipping (``max_grad_norm``, on the global norm). We apply it as the paper says;
  expect it to matter little.

Through ``Trainer``: multi-GPU via ``torchrun`` / ``accelerate launch``, checkpoints and
``resume_from_checkpoint``. Precise SFT's checkpoints hold the adapter files (not the frozen weights) plus
optimizer, scheduler and RNG state. Each log line also goes to ``<output_dir>/log.jsonl``.

Example::

    model, tok = load_hf_model("embedded")
    data = build_sft_dataset(tok, generate_pairs(tok, load_templates(), GenerationConfig(...)))
    adapter, result = train_sft(model, tok, data, "runs/precise", key=KeyComponents.load("key.json"))
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase, TrainerCallback, TrainerState, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from mathcircuits._errors import FixableFileNotFoundError, FixableValueError
from mathcircuits.finetune.adapter import HeadSliceAdapter
from mathcircuits.finetune.config import SFTConfig
from mathcircuits.finetune.hf_trainer import pad_collate, prepare_resume, trainer_classes
from mathcircuits.finetune.methods import METHODS
from mathcircuits.finetune.result import SFTResult
from mathcircuits.finetune.sliceset import SliceSet
from mathcircuits.models import ModelSpec, check_trainable_placement
from mathcircuits.patching import KeyComponents

__all__ = ["train_sft"]

log = logging.getLogger(__name__)


def train_sft(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    train_dataset: datasets.Dataset,
    output_dir: str | Path,
    key: KeyComponents | SliceSet | None = None,
    config: SFTConfig | None = None,
    resume_from_checkpoint: str | bool | None = None,
    model_name: str | None = None,
    callbacks: Sequence[TrainerCallback] = (),
) -> tuple[nn.Module, SFTResult]:
    """Fine-tune ``model`` on ``train_dataset`` (``input_ids``/``labels``, see :func:`build_sft_dataset`).

    Precise mode wraps ``model`` in a :class:`HeadSliceAdapter` built from ``key`` (a :class:`KeyComponents` mapped
    with ``config.kv_policy``, or a ready :class:`SliceSet`), or trains an adapter passed as ``model`` (then ``key``
    is None); LoRA wraps it in PEFT LoRA; full mode trains every parameter. The tokenizer's pad id (else EOS) pads.
    ``resume_from_checkpoint``: a checkpoint folder, True for the latest in ``output_dir`` (FileNotFoundError when
    there is none), None to start afresh. ``model_name`` is recorded and maps ``key`` to slices.

    Returns the trained adapter or model (eval mode) and its :class:`SFTResult` (also ``<output_dir>/sft_result.json``;
    the final adapter or model goes to ``<output_dir>/final``). Refuses a model split by a ``device_map``
    (:func:`~mathcircuits.models.check_trainable_placement`).
    """

    output_dir = Path(output_dir)
    config = config or SFTConfig()
    check_trainable_placement(model)
    train_model = METHODS[config.mode](model, key, config, model_name)
    for column in ("input_ids", "labels"):
        if column not in train_dataset.column_names:
            raise FixableValueError(
                f"train_dataset lacks {column!r} (has {train_dataset.column_names}). ",
                "build it with build_sft_dataset().",
            )

    if resume_from_checkpoint is True:
        last = get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None
        if last is None:
            raise FixableFileNotFoundError(
                f"resume_from_checkpoint=True but {output_dir} holds no checkpoint-N folder. ",
                "pass a checkpoint path, or None to start afresh.",
            )
        resume_from_checkpoint = last
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    args = TrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=config.micro_batch_size,
        gradient_accumulation_steps=config.accumulation_steps(world_size),
        learning_rate=config.learning_rate,
        num_train_epochs=config.epochs,
        max_steps=config.max_steps,
        warmup_steps=config.warmup_ratio,  # a float < 1 is a fraction of the steps (transformers >= 5)
        weight_decay=config.weight_decay,
        lr_scheduler_type=config.lr_scheduler,
        max_grad_norm=config.max_grad_norm,
        logging_steps=config.logging_steps,
        logging_first_step=True,
        save_strategy="steps" if config.save_steps > 0 else "no",
        save_steps=config.save_steps if config.save_steps > 0 else 500,
        save_total_limit=config.save_total_limit,
        seed=config.seed,
        data_seed=config.seed,
        bf16=config.bf16,
        report_to="none",
        disable_tqdm=not config.progress_bar,
        remove_unused_columns=False,
        dataloader_num_workers=config.dataloader_num_workers,
        dataloader_pin_memory=torch.cuda.is_available(),
        use_cpu=not torch.cuda.is_available(),  # under torchrun on a CPU this makes accelerate set up DDP (gloo)
        ddp_backend=None if torch.cuda.is_available() or world_size == 1 else "gloo",
    )
    base = train_model.base_model if isinstance(train_model, HeadSliceAdapter) else train_model
    if config.mode == "lora":
        base = train_model.get_base_model()
    target_only = config.target_logits_only and takes_logit_mask(base)
    if config.target_logits_only and not target_only:
        log.info("%s.forward takes no boolean logits_to_keep: computing logits at every position", type(base).__name__)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    trainer_cls, jsonl_log = trainer_classes()
    output_dir.mkdir(parents=True, exist_ok=True)
    trainer = trainer_cls(
        model=train_model,
        args=args,
        train_dataset=train_dataset,
        data_collator=pad_collate(pad_id, target_logits_only=target_only),
        processing_class=tokenizer,
        callbacks=[jsonl_log(output_dir / "log.jsonl"), *callbacks],
        decay_mode=config.decay_mode,
    )
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class _BarOnly(ProgressCallback):  # one bar; the losses go to log.jsonl, not between the bar's redraws
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            return None

    trainer.remove_callback(PrinterCallback)  # with the bar off it would print every log dict
    trainer.remove_callback(ProgressCallback)
    if config.progress_bar:
        trainer.add_callback(_BarOnly())
    t0 = time.perf_counter()
    done_step = prepare_resume(output_dir, resume_from_checkpoint, config.max_steps)
    if resume_from_checkpoint not in (None, False):
        trainer.restore_loss_sum(str(resume_from_checkpoint))
    if done_step is None:
        out = trainer.train(resume_from_checkpoint=resume_from_checkpoint)
        samples_per_second = float(out.metrics.get("train_samples_per_second", float("nan")))
    else:  # the checkpoint already holds max_steps: load it, never train past max_steps
        trainer._load_from_checkpoint(str(resume_from_checkpoint))
        trainer.state = TrainerState.load_from_json(str(Path(resume_from_checkpoint) / "trainer_state.json"))
        samples_per_second = float("nan")
    # every step's loss, before and after a resume (Trainer's own training_loss restarts at the resume)
    train_loss = trainer.loss_sum / trainer.state.global_step if trainer.state.global_step else float("nan")
    runtime = time.perf_counter() - t0
    if config.save_final:
        trainer.save_model(str(output_dir / "final"))
    train_model.eval()
    history = tuple((int(e["step"]), float(e["loss"])) for e in trainer.state.log_history if "loss" in e)
    n_trainable = (
        train_model.n_trainable
        if isinstance(train_model, HeadSliceAdapter)
        else sum(p.numel() for p in train_model.parameters() if p.requires_grad)
    )
    result = SFTResult(
        mode=config.mode,
        config=config,
        model=ModelSpec.from_hf(base, model_name),
        n_trainable=int(n_trainable),
        n_model_params=int(sum(p.numel() for n, p in base.named_parameters() if "lora_" not in n)),
        global_step=int(trainer.state.global_step),
        train_loss=train_loss,
        loss_history=history,
        runtime_s=runtime,
        samples_per_second=samples_per_second,
        output_dir=str(output_dir),
        resumed_from=None if resume_from_checkpoint in (None, False) else str(resume_from_checkpoint),
        slices=train_model.slices if isinstance(train_model, HeadSliceAdapter) else None,
    )
    if trainer.args.should_save:
        result.save(output_dir / "sft_result.json")
    return train_model, result


def takes_logit_mask(model: torch.nn.Module) -> bool:
    """Whether ``model.forward`` accepts a boolean ``[batch, seq]`` mask as ``logits_to_keep``.

    Models that slice with ``slice_logits_to_keep`` (transformers 5.24: Llama, Gemma, ...) do; older releases (5.17 on
    the GPU machine's check) index ``hidden_states[:, logits_to_keep, :]`` and fail, so logits are then
    computed everywhere.
    """
    if "logits_to_keep" not in inspect.signature(model.forward).parameters:
        return False
    module = sys.modules.get(type(model).__module__)
    return module is not None and hasattr(module, "slice_logits_to_keep")
