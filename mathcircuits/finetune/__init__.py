"""Stage ``finetune`` — precise SFT of the key heads and MLPs (Zhang et al. 2024, §5), LoRA and full SFT as baselines.

* :mod:`~mathcircuits.finetune.layouts` says, per model family, where a head's features live (data);
* :mod:`~mathcircuits.finetune.slices` maps key components to exact parameter slices (:mod:`.sliceset`);
* :mod:`~mathcircuits.finetune.adapter` trains deltas on those slices only (PEFT-style artifact);
* :mod:`~mathcircuits.finetune.data` builds SFT examples (loss on the answer only);
* :mod:`~mathcircuits.finetune.modes` — what a run tunes, as a :class:`Mode` value (``precise@4+mlp``);
* :mod:`~mathcircuits.finetune.config` / :mod:`.result` — :class:`SFTConfig` and :class:`SFTResult`;
* :mod:`~mathcircuits.finetune.methods` — one strategy per SFT method (:data:`METHODS`);
* :mod:`~mathcircuits.finetune.sft` — :func:`train_sft`, any method through HF ``Trainer``
  (:mod:`.hf_trainer` holds the ``Trainer`` glue);
* :mod:`~mathcircuits.finetune.compare` compares modes fairly (same data and steps, a learning-rate sweep each),
  with :mod:`.components` (what each mode tunes) and :mod:`.validation` (the split rates are chosen on).

See docs/finetune.md.
"""

from mathcircuits.finetune.adapter import ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, HeadSliceAdapter
from mathcircuits.finetune.compare import (
    CompareConfig,
    CompareSettings,
    SFTComparison,
    SweepRun,
    check_modes,
    compare_sft,
    load_tuned,
)
from mathcircuits.finetune.components import lora_rank_for_budget, mode_components, random_heads
from mathcircuits.finetune.config import SFTConfig
from mathcircuits.finetune.data import DEFAULT_PROMPT, build_sft_dataset, format_gold
from mathcircuits.finetune.hf_trainer import effective_decay_hook, pad_collate
from mathcircuits.finetune.layouts import (
    HEAD_ROLES,
    KV_POLICIES,
    LAYOUTS,
    AttentionLayout,
    KVPolicy,
    Projection,
    SliceError,
    model_facts,
    resolve_layout,
)
from mathcircuits.finetune.methods import METHODS, lora_model, lora_targets
from mathcircuits.finetune.modes import Mode, ModeKind, SFTMethod
from mathcircuits.finetune.result import SFTResult
from mathcircuits.finetune.sft import train_sft
from mathcircuits.finetune.slices import head_slices
from mathcircuits.finetune.sliceset import ParamSlice, SliceSet
from mathcircuits.finetune.validation import score_arithmetic, split_validation

__all__ = [
    "ADAPTER_CONFIG_NAME",
    "ADAPTER_WEIGHTS_NAME",
    "DEFAULT_PROMPT",
    "HEAD_ROLES",
    "KV_POLICIES",
    "LAYOUTS",
    "METHODS",
    "AttentionLayout",
    "CompareConfig",
    "CompareSettings",
    "HeadSliceAdapter",
    "KVPolicy",
    "Mode",
    "ModeKind",
    "ParamSlice",
    "Projection",
    "SFTComparison",
    "SFTConfig",
    "SFTMethod",
    "SFTResult",
    "SliceError",
    "SliceSet",
    "SweepRun",
    "build_sft_dataset",
    "check_modes",
    "compare_sft",
    "effective_decay_hook",
    "format_gold",
    "head_slices",
    "load_tuned",
    "lora_model",
    "lora_rank_for_budget",
    "lora_targets",
    "mode_components",
    "model_facts",
    "pad_collate",
    "random_heads",
    "resolve_layout",
    "score_arithmetic",
    "split_validation",
    "train_sft",
]
