"""Stage ``finetune`` — precise SFT of the key heads and MLPs (Zhang et al. 2024, §5), LoRA and full SFT as baselines.

:mod:`.layouts` says per model family where a head's features live; :mod:`.slices` maps key components to exact
parameter slices; :mod:`.adapter` trains deltas on those slices only; :func:`train_sft` runs any method
(:data:`METHODS`) through HF ``Trainer``. The fair comparison of modes (:class:`Mode`) runs as resumable units
(:mod:`.compare`, :mod:`.protocol`, :mod:`.run_unit`), with a depth- and parameter-matched random-heads control
(:mod:`.matched`) and each mode's change against base with intervals over items and seeds (:mod:`.effects`).
See docs/finetune.md.
"""

from mathcircuits._checks import check_exports
from mathcircuits.finetune.adapter import ADAPTER_CONFIG_NAME, ADAPTER_WEIGHTS_NAME, HeadSliceAdapter, TrainableSummary
from mathcircuits.finetune.compare import CompareConfig, check_modes
from mathcircuits.finetune.components import lora_rank_for_budget, mode_components, random_heads
from mathcircuits.finetune.config import SFTConfig
from mathcircuits.finetune.data import DEFAULT_PROMPT, build_sft_dataset, format_gold
from mathcircuits.finetune.effects import (
    EffectsTable,
    ModeEffects,
    ParetoPoint,
    SweepPoint,
    difference,
    effects_table,
    pareto_points,
    pareto_records,
    sweep_records,
    sweep_table,
)
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
from mathcircuits.finetune.matched import MatchedDraw, kv_shared_heads, matched_random_heads
from mathcircuits.finetune.methods import METHODS, lora_model, lora_targets
from mathcircuits.finetune.modes import Mode, ModeKind, SFTMethod
from mathcircuits.finetune.protocol import choose_rates, compare_units, units_remaining
from mathcircuits.finetune.result import SFTResult
from mathcircuits.finetune.run_unit import Scorers, execute_unit, unit_components
from mathcircuits.finetune.sft import train_sft
from mathcircuits.finetune.slices import head_slices
from mathcircuits.finetune.sliceset import ParamSlice, SliceSet
from mathcircuits.finetune.units import (
    ItemScores,
    RateChoice,
    Unit,
    UnitComparison,
    UnitPlan,
    UnitRecord,
)
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
    "EffectsTable",
    "HeadSliceAdapter",
    "ItemScores",
    "KVPolicy",
    "MatchedDraw",
    "Mode",
    "ModeEffects",
    "ModeKind",
    "ParamSlice",
    "ParetoPoint",
    "Projection",
    "RateChoice",
    "SFTConfig",
    "SFTMethod",
    "SFTResult",
    "Scorers",
    "SliceError",
    "SliceSet",
    "SweepPoint",
    "TrainableSummary",
    "Unit",
    "UnitComparison",
    "UnitPlan",
    "UnitRecord",
    "build_sft_dataset",
    "check_modes",
    "choose_rates",
    "compare_units",
    "difference",
    "effective_decay_hook",
    "effects_table",
    "execute_unit",
    "format_gold",
    "head_slices",
    "kv_shared_heads",
    "lora_model",
    "lora_rank_for_budget",
    "lora_targets",
    "matched_random_heads",
    "mode_components",
    "model_facts",
    "pad_collate",
    "pareto_points",
    "pareto_records",
    "random_heads",
    "resolve_layout",
    "score_arithmetic",
    "split_validation",
    "sweep_records",
    "sweep_table",
    "train_sft",
    "unit_components",
    "units_remaining",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
