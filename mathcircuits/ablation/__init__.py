"""Stage ``validate`` — ablation: knockout curves (mean, per-position mean or resampling) and transfer checks."""

from mathcircuits._checks import check_exports
from mathcircuits.ablation.control import RandomControl, control_and_margin, control_margin_mediation, random_control
from mathcircuits.ablation.cross import CrossOperation, cross_operation
from mathcircuits.ablation.hooks import Ablation, Scope, ablated_model
from mathcircuits.ablation.knockout import ablated_accuracy, knockout_curve
from mathcircuits.ablation.means import HeadMeans, PositionPool, head_means
from mathcircuits.ablation.mediation import MLPMediation, mlp_mediation
from mathcircuits.ablation.mlp_margin import MLPMargin, mlp_margin
from mathcircuits.ablation.result import KnockoutResult, TransferResult, TransferRow, TransferStatus
from mathcircuits.ablation.scorer import KnockoutScorer
from mathcircuits.ablation.transfer import transfer

__all__ = [
    "PositionPool",
    "Ablation",
    "HeadMeans",
    "CrossOperation",
    "KnockoutResult",
    "KnockoutScorer",
    "MLPMargin",
    "MLPMediation",
    "RandomControl",
    "Scope",
    "TransferResult",
    "TransferRow",
    "TransferStatus",
    "ablated_accuracy",
    "ablated_model",
    "control_and_margin",
    "control_margin_mediation",
    "cross_operation",
    "head_means",
    "knockout_curve",
    "mlp_margin",
    "mlp_mediation",
    "random_control",
    "transfer",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
