"""Stage 5 — finetune: precise SFT of the key heads and MLPs (Zhang et al. 2024, §5), and full SFT as baseline.

* :mod:`~mathcircuits.finetune.layouts` says, per model family, where a head's features live (data);
* :mod:`~mathcircuits.finetune.slices` maps key components to exact parameter slices;
* :mod:`~mathcircuits.finetune.adapter` trains deltas on those slices only (PEFT-style artifact);
* :mod:`~mathcircuits.finetune.data` builds SFT examples (loss on the answer only);
* :mod:`~mathcircuits.finetune.train` runs precise or full SFT through HF ``Trainer``.

See docs/finetune.md.
"""

from mathcircuits.finetune.adapter import ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, HeadSliceAdapter
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
from mathcircuits.finetune.train import SFTConfig, SFTResult, pad_collate, train_sft

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
    "SFTResult",
    "SliceError",
    "SliceSet",
    "build_sft_dataset",
    "format_gold",
    "head_slices",
    "model_facts",
    "pad_collate",
    "read_word_problems",
    "resolve_layout",
    "train_sft",
]
