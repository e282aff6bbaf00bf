"""Stage 5 — finetune: precise SFT of the key heads and MLPs (Zhang et al. 2024, §5), and full SFT as baseline.

* :mod:`~mathcircuits.finetune.layouts` says, per model family, where a head's features live (data);
* :mod:`~mathcircuits.finetune.slices` maps key components to exact parameter slices;
* :mod:`~mathcircuits.finetune.adapter` trains deltas on those slices only (PEFT-style artifact);
* :mod:`~mathcircuits.finetune.data` builds SFT examples (loss on the answer only);
* :mod:`~mathcircuits.finetune.train` runs precise, LoRA or full SFT through HF ``Trainer``;
* :mod:`~mathcircuits.finetune.compare` — the fair comparison's settings (same data and steps, a rate sweep each);
* :mod:`~mathcircuits.finetune.units` — resumable (mode, rate, seed) units; :mod:`.protocol` runs them (sweep, choice,
  seeds), :mod:`.run_unit` trains one;
* :mod:`~mathcircuits.finetune.matched` — the depth- and parameter-matched random-heads control, K/V side effects;
* :mod:`~mathcircuits.finetune.effects` — each mode's change against base, with intervals over items and seeds.

See docs/finetune.md.
"""

from mathcircuits.finetune.adapter import ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, HeadSliceAdapter
from mathcircuits.finetune.compare import CompareConfig
from mathcircuits.finetune.data import DEFAULT_PROMPT, build_sft_dataset, format_gold, read_word_problems
from mathcircuits.finetune.effects import difference, effects_table, pareto_points
from mathcircuits.finetune.matched import MatchedDraw, kv_shared_heads, matched_random_heads
from mathcircuits.finetune.protocol import compare_units, units_remaining
from mathcircuits.finetune.run_unit import Scorers, execute_unit
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
from mathcircuits.finetune.units import (
    ItemScores,
    RateChoice,
    Unit,
    UnitComparison,
    UnitPlan,
    UnitRecord,
)

__all__ = [
    "ADAPTER_CONFIG_NAME",
    "ADAPTER_WEIGHTS_NAME",
    "DEFAULT_PROMPT",
    "HEAD_ROLES",
    "KV_POLICIES",
    "LAYOUTS",
    "AttentionLayout",
    "CompareConfig",
    "HeadSliceAdapter",
    "ItemScores",
    "MatchedDraw",
    "ParamSlice",
    "Projection",
    "RateChoice",
    "SFTConfig",
    "SFTResult",
    "Scorers",
    "SliceError",
    "SliceSet",
    "Unit",
    "UnitComparison",
    "UnitPlan",
    "UnitRecord",
    "build_sft_dataset",
    "compare_units",
    "difference",
    "effects_table",
    "execute_unit",
    "format_gold",
    "head_slices",
    "kv_shared_heads",
    "lora_model",
    "matched_random_heads",
    "model_facts",
    "pad_collate",
    "pareto_points",
    "read_word_problems",
    "resolve_layout",
    "train_sft",
    "units_remaining",
]
