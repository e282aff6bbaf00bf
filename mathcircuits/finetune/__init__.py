"""Stage 5 — finetune: precise SFT of the key heads and MLPs (Zhang et al. 2024, §5), and full SFT as baseline.

* :mod:`~mathcircuits.finetune.layouts` says, per model family, where a head's features live (data);
* :mod:`~mathcircuits.finetune.slices` maps key components to exact parameter slices;
* :mod:`~mathcircuits.finetune.adapter` trains deltas on those slices only (PEFT-style artifact);
* :mod:`~mathcircuits.finetune.data` builds SFT examples (loss on the answer only);
* :mod:`~mathcircuits.finetune.train` runs precise, LoRA or full SFT through HF ``Trainer``;
* :mod:`~mathcircuits.finetune.compare` compares modes fairly (same data and steps, a learning-rate sweep each).

See docs/finetune.md.
"""

from mathcircuits.finetune.adapter import ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, HeadSliceAdapter
from mathcircuits.finetune.compare import SFTComparison, SweepRun, compare_sft, load_tuned
from mathcircuits.finetune.data import DEFAULT_PROMPT, build_sft_dataset, format_gold, read_word_problems
from mathcircuits.finetune.slices import (
    HEAD_ROLES,
    KV_POLICIES,
    LAYOUTS,
    AttentionLayout,
    ParamSlice,
    Projection,
    SliceError,
    SliceSet,
    head_slices,
    model_facts,
    resolve_layout,
)
from mathcircuits.finetune.train import SFTConfig, SFTResult, lora_model, pad_collate, train_sft

__all__ = [
    "ADAPTER_CONFIG_NAME",
    "ADAPTER_WEIGHTS_NAME",
    "DEFAULT_PROMPT",
    "HEAD_ROLES",
    "KV_POLICIES",
    "LAYOUTS",
    "AttentionLayout",
    "HeadSliceAdapter",
    "ParamSlice",
    "Projection",
    "SFTConfig",
    "SFTComparison",
    "SFTResult",
    "SliceError",
    "SliceSet",
    "SweepRun",
    "build_sft_dataset",
    "compare_sft",
    "format_gold",
    "head_slices",
    "load_tuned",
    "lora_model",
    "model_facts",
    "pad_collate",
    "read_word_problems",
    "resolve_layout",
    "train_sft",
]
