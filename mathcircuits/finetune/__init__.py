"""Stage ``finetune`` — precise SFT of the key heads and MLPs (Zhang et al. 2024, §5), LoRA and full SFT as baselines.

:mod:`.layouts` says per model family where a head's features live; :mod:`.slices` maps key components to exact
parameter slices; :mod:`.adapter` trains deltas on those slices only; :func:`train_sft` runs any method
(:data:`~.methods.METHODS`) through HF ``Trainer``. The fair comparison of modes (:class:`Mode`) runs as resumable units
(:mod:`.compare`, :mod:`.protocol`, :mod:`.run_unit`), with a depth- and parameter-matched random-heads control
(:mod:`.matched`) and each mode's change against base with intervals over items and seeds (:mod:`.effects`).
See docs/finetune.md.
"""

from mathcircuits._checks import check_exports
from mathcircuits.finetune.adapter import HeadSliceAdapter, TrainableSummary
from mathcircuits.finetune.compare import CompareConfig
from mathcircuits.finetune.config import SFTConfig
from mathcircuits.finetune.data import build_sft_dataset
from mathcircuits.finetune.effects import (
    EffectsTable,
    ModeEffects,
    ParetoPoint,
    SweepPoint,
    difference,
    effects_table,
    pareto_records,
    sweep_records,
)
from mathcircuits.finetune.layouts import LAYOUTS, KVPolicy, SliceError
from mathcircuits.finetune.modes import Mode, ModeKind, SFTMethod
from mathcircuits.finetune.protocol import compare_units
from mathcircuits.finetune.result import SFTResult
from mathcircuits.finetune.run_unit import Scorers
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

__all__ = [
    "LAYOUTS",
    "CompareConfig",
    "EffectsTable",
    "HeadSliceAdapter",
    "ItemScores",
    "KVPolicy",
    "Mode",
    "ModeEffects",
    "ModeKind",
    "ParamSlice",
    "ParetoPoint",
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
    "compare_units",
    "difference",
    "effects_table",
    "head_slices",
    "pareto_records",
    "sweep_records",
    "train_sft",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
