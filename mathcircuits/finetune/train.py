"""Precise SFT (key components only) and full SFT through HF ``Trainer``.

Zhang et al. (ICML 2024, §5) fine-tune only the key heads and MLPs found by
path patching ("precise SFT") and compare with full SFT on the same data.
Their settings are the defaults of :class:`SFTConfig`: learning rate 2e-5,
batch 128 (here ``micro_batch_size`` × gradient accumulation × devices),
2 epochs, linear warm-up over 2% of the steps, weight decay 0.1, and the
gradient of a layer's tuned heads rescaled by ``H/h`` (``H`` heads in the
layer, ``h`` of them tuned).

Notes on faithfulness:

* **Weight decay.** With ``decay_mode="weights"`` (default) the tuned entries
  decay like in full SFT: AdamW's decoupled step ``W ← W − lr·wd·W`` on the
  effective weight ``W = W₀ + Δ`` becomes ``Δ ← Δ − lr·wd·(W₀ + Δ)``, applied
  by an optimizer pre-step hook (biases are not decayed, as in ``Trainer``).
  ``"delta"`` decays Δ towards zero instead (towards the pre-trained weights).
  Either way the frozen base is never in the optimizer, so nothing else moves.
* **Gradient rescaling.** Adam normalises gradients per entry, so a constant
  factor ``H/h`` cancels in the update except through ε and through gradient
  clipping (``max_grad_norm``, on the global norm). We apply it as the paper
  says; expect it to matter little.

Training runs through ``transformers.Trainer`` (multi-GPU via ``torchrun`` /
``accelerate launch``, progress bar, loss log, checkpoints, and
``resume_from_checkpoint``). Checkpoints of precise SFT hold the adapter files
(not the 100s of MB of frozen weights) plus optimizer, scheduler and RNG state.
Each log line also goes to ``<output_dir>/log.jsonl``.

Usage::

    model, tok = load_hf_model("embedded")
    data = build_sft_dataset(tok, generate_pairs(tok, load_templates(), GenerationConfig(...)))
    adapter, result = train_sft(model, tok, data, "runs/precise", key=KeyComponents.load("key.json"))
    adapter.save_pretrained("runs/precise/adapter")   # also written at the end as <output_dir>/final
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Sequence

import pandas as pd
import torch
from torch import nn
from transformers import TrainerState, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from mathcircuits._io import SavedResult
from mathcircuits._schema import check_fields, setting
from mathcircuits._schema import from_dict as config_from_dict
from mathcircuits.finetune.adapter import HeadSliceAdapter
from mathcircuits.finetune.slices import KV_POLICIES, SliceSet, head_slices
from mathcircuits.finetune.trainer import _prepare_resume, _trainer_classes, pad_collate
from mathcircuits.models.spec import ModelSpec, as_spec
from mathcircuits.patching.selection import KeyComponents

__all__ = ["SFTConfig", "SFTResult", "lora_model", "lora_targets", "train_sft", "pad_collate"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SFTConfig:
    """Settings of one SFT run (paper defaults). ``mode="full"`` is the full-SFT baseline."""

    mode: Literal["precise", "full", "lora"] = setting(
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
    lr_scheduler: str = setting("linear", "transformers scheduler name")
    max_grad_norm: float = setting(1.0, "gradient clipping (global norm)", gt=0)
    grad_scale: bool = setting(True, "rescale a layer's tuned heads' gradient by H/h (precise only)")
    target_logits_only: bool = setting(True, "vocabulary logits only at target positions (same loss, faster)")
    kv_policy: Literal["group", "exclusive", "frozen"] = setting(
        "group", "shared K/V under GQA: group (tune the group) | exclusive | frozen"
    )
    include_mlps: bool = setting(True, "also tune the key MLPs (precise)")
    lora_rank: int = setting(8, "LoRA rank (lora mode; see finetune.compare.lora_rank_for_budget)", ge=1)
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
        if self.kv_policy not in KV_POLICIES:
            raise ValueError(f"kv_policy={self.kv_policy!r}. Fix: use one of {KV_POLICIES}.")
        if self.max_steps == 0:
            raise ValueError("max_steps=0 trains nothing. Fix: give a positive number of steps, or -1 to use epochs.")
        if self.batch_size % self.micro_batch_size:
            raise ValueError(
                f"batch_size={self.batch_size} must be a positive multiple of "
                f"micro_batch_size={self.micro_batch_size}. "
                "Fix: make batch_size a multiple of micro_batch_size."
            )

    def accumulation_steps(self, world_size: int = 1) -> int:
        per_step = self.micro_batch_size * world_size
        if self.batch_size % per_step:
            raise ValueError(
                f"batch_size={self.batch_size} is not a multiple of micro_batch_size × devices = {per_step}. "
                "Fix: choose batch_size, micro_batch_size and the number of devices so that it divides."
            )
        return self.batch_size // per_step

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SFTConfig":
        """Build from a mapping (lists are accepted for tuples); unknown keys are an error."""
        return config_from_dict(cls, d)


@dataclass(frozen=True)
class SFTResult(SavedResult):
    """What one SFT run did: settings, tuned-parameter counts, loss history and speed.

    ``model`` is the :class:`~mathcircuits.models.ModelSpec` of the tuned model (a dict from
    ``ModelSpec.to_dict()`` is accepted and converted). Saved as JSON by ``save("sft_result.json")``.
    """

    STAGE = "finetune"

    mode: str
    config: dict[str, Any]
    model: ModelSpec | dict[str, Any]
    n_trainable: int
    n_model_params: int
    global_step: int
    train_loss: float
    loss_history: tuple[tuple[int, float], ...]
    runtime_s: float
    samples_per_second: float
    output_dir: str
    resumed_from: str | None = None
    slices: dict[str, Any] = field(default_factory=dict)  # SliceSet.to_dict() for precise SFT

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", as_spec(self.model))

    def to_dataframe(self):

        return pd.DataFrame(list(self.loss_history), columns=["step", "loss"])


def lora_targets(model: nn.Module) -> tuple[str, ...]:
    """The attention projections LoRA adapts: the q, k, v, o modules of the model's layout (as PEFT suffixes).

    Args:
        model: a plain HF causal LM of a family in :data:`~mathcircuits.finetune.LAYOUTS`.

    Returns:
        Module-name suffixes, e.g. ``("self_attn.q_proj", ..., "self_attn.o_proj")``.
    """
    from mathcircuits.finetune.layouts import resolve_layout

    layout = resolve_layout(model)
    return tuple(dict.fromkeys(layout.projection(r).module for r in ("q", "k", "v", "o")))


def lora_model(model: nn.Module, rank: int, alpha: float = 16.0, dropout: float = 0.0) -> nn.Module:
    """Wrap ``model`` in a PEFT LoRA model on its attention projections (:func:`lora_targets`).

    Args:
        model: a plain HF causal LM.
        rank: LoRA rank ``r`` (each adapted ``[out, in]`` weight gains ``r·(in + out)`` parameters).
        alpha: scaling numerator (the update is ``alpha / r · B A``).
        dropout: LoRA dropout (0: deterministic, as the other modes).

    Returns:
        The PEFT model; only its LoRA matrices require gradients.
    """
    from peft import LoraConfig, get_peft_model  # heavy, optional at import

    cfg = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(lora_targets(model)))
    return get_peft_model(model, cfg)


def train_sft(
    model: nn.Module,
    tokenizer: Any,
    train_dataset: Any,
    output_dir: str | Path,
    key: KeyComponents | SliceSet | None = None,
    config: SFTConfig = SFTConfig(),
    resume_from_checkpoint: str | bool | None = None,
    model_name: str | None = None,
    callbacks: Sequence[Any] = (),
) -> tuple[nn.Module, SFTResult]:
    """Fine-tune ``model`` on ``train_dataset`` (``input_ids``/``labels``, see :func:`build_sft_dataset`).

    Precise mode wraps ``model`` in a :class:`HeadSliceAdapter` built from
    ``key`` (a :class:`KeyComponents`, mapped with ``config.kv_policy``, or a
    ready :class:`SliceSet`), or trains an adapter passed as ``model``. Full
    mode trains every parameter of ``model``. ``resume_from_checkpoint``: a
    checkpoint folder, or True for the latest in ``output_dir``. Returns the
    trained module (adapter or model, in eval mode) and an :class:`SFTResult`
    (also saved as ``<output_dir>/sft_result.json``; the final adapter or
    model goes to ``<output_dir>/final``).

    Args:
        model: a Hugging Face causal LM, or (precise mode) a ready :class:`HeadSliceAdapter`.
        tokenizer: the model's tokenizer (its pad id, else EOS id, pads the batches).
        train_dataset: a ``datasets.Dataset`` with ``input_ids`` and ``labels`` columns.
        output_dir: folder for checkpoints, ``log.jsonl``, ``sft_result.json`` and ``final``.
        key: precise mode: the components to train, a :class:`KeyComponents` or :class:`SliceSet`
            (None when ``model`` is an adapter).
        config: the :class:`SFTConfig` (mode, optimiser, schedule, batch sizes, saving).
        resume_from_checkpoint: a checkpoint folder, True for the latest in ``output_dir``, or None to start afresh.
        model_name: the model's name, recorded in the result's spec and used to map ``key`` to slices.
        callbacks: extra ``transformers`` trainer callbacks.

    Returns:
        ``(trained_module, result)``: the trained adapter or model (in eval mode) and its :class:`SFTResult`.

    Raises:
        ValueError: if precise mode gets both an adapter and ``key``, or neither; full mode gets an adapter;
            or ``train_dataset`` lacks ``input_ids`` or ``labels``.
        FileNotFoundError: if ``resume_from_checkpoint=True`` but ``output_dir`` holds no checkpoint.
    """

    output_dir = Path(output_dir)
    if config.mode == "precise":
        if isinstance(model, HeadSliceAdapter):
            if key is not None:
                raise ValueError(
                    "train_sft got an adapter and a key selection. "
                    "Fix: pass one of them (the adapter already fixes the slices)."
                )
            train_model: nn.Module = model
        else:
            if key is None:
                raise ValueError(
                    "precise SFT got no key components. "
                    "Fix: pass key=KeyComponents (or a SliceSet), or use SFTConfig(mode='full')."
                )
            slices = (
                key
                if isinstance(key, SliceSet)
                else head_slices(
                    model, key, kv_policy=config.kv_policy, include_mlps=config.include_mlps, model_name=model_name
                )
            )  # type: ignore[arg-type]
            train_model = HeadSliceAdapter(model, slices, grad_scale=config.grad_scale)
    elif config.mode == "lora":
        if isinstance(model, HeadSliceAdapter):
            raise ValueError("LoRA SFT got a HeadSliceAdapter. Fix: pass the plain HF model.")
        train_model = lora_model(model, config.lora_rank, config.lora_alpha)
    else:
        if isinstance(model, HeadSliceAdapter):
            raise ValueError(
                "full SFT got a HeadSliceAdapter. "
                "Fix: pass the plain HF model (adapter.merge_and_unload() or a fresh load_hf_model())."
            )
        model.requires_grad_(True)
        train_model = model
    for column in ("input_ids", "labels"):
        if column not in train_dataset.column_names:
            raise ValueError(
                f"train_dataset lacks {column!r} (has {train_dataset.column_names}). "
                "Fix: build it with build_sft_dataset()."
            )

    if resume_from_checkpoint is True:
        last = get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None
        if last is None:
            raise FileNotFoundError(
                f"resume_from_checkpoint=True but {output_dir} holds no checkpoint-N folder. "
                "Fix: pass a checkpoint path, or None to start afresh."
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
    target_only = config.target_logits_only and "logits_to_keep" in inspect.signature(base.forward).parameters
    if config.target_logits_only and not target_only:
        log.info("%s.forward has no logits_to_keep: computing logits at every position", type(base).__name__)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    trainer_cls, jsonl_log = _trainer_classes()
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
    done_step = _prepare_resume(output_dir, resume_from_checkpoint, config.max_steps)
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
        config=config.to_dict(),
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
        slices=train_model.slices.to_dict() if isinstance(train_model, HeadSliceAdapter) else {},
    )
    if trainer.args.should_save:
        result.save(output_dir / "sft_result.json")
    return train_model, result
