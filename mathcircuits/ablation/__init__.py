"""Stage ``validate`` — ablation: knockout curves (mean, per-position mean or resampling) and transfer checks."""

from mathcircuits._checks import check_exports
from mathcircuits.ablation.control import RandomControl, depth_matched_draws, n_depth_matched_sets, random_control
from mathcircuits.ablation.cross import CrossOperation, cross_operation, jaccard
from mathcircuits.ablation.hooks import (
    ABLATIONS,
    SCOPES,
    Ablation,
    Scope,
    ablated_model,
    mean_ablation_hooks,
    z_ablation_hooks,
)
from mathcircuits.ablation.knockout import ablated_accuracy, knockout_curve
from mathcircuits.ablation.means import HeadMeans, PoolKey, PositionPool, head_means
from mathcircuits.ablation.mlp_margin import MLPMargin, mlp_margin
from mathcircuits.ablation.result import (
    MEASURED,
    NOT_MEASURABLE,
    KnockoutResult,
    TransferResult,
    TransferRow,
    TransferStatus,
)
from mathcircuits.ablation.scorer import KnockoutScorer, check_knockout
from mathcircuits.ablation.transfer import transfer, transfer_row

__all__ = [
    "ABLATIONS",
    "MEASURED",
    "NOT_MEASURABLE",
    "PoolKey",
    "PositionPool",
    "SCOPES",
    "Ablation",
    "HeadMeans",
    "CrossOperation",
    "KnockoutResult",
    "KnockoutScorer",
    "MLPMargin",
    "RandomControl",
    "Scope",
    "TransferResult",
    "TransferRow",
    "TransferStatus",
    "ablated_accuracy",
    "ablated_model",
    "check_knockout",
    "cross_operation",
    "depth_matched_draws",
    "head_means",
    "knockout_curve",
    "jaccard",
    "mean_ablation_hooks",
    "mlp_margin",
    "n_depth_matched_sets",
    "random_control",
    "transfer",
    "transfer_row",
    "z_ablation_hooks",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
