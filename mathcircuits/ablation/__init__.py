"""Stage ``validate`` — ablation: knockout curves (mean, per-position mean or resampling) and transfer checks.

* :mod:`.means` — :func:`head_means`, the position-free mean of every head's output;
* :mod:`.hooks` — the ablation choices and the hooks that replace a head's ``hook_z``;
* :mod:`.scorer` — :class:`KnockoutScorer`, one pair set under many knockouts (exact savings);
* :mod:`.knockout` — :func:`knockout_curve` and :func:`ablated_accuracy`;
* :mod:`.transfer` — :func:`transfer`, the key heads on data not used to find them;
* :mod:`.cross` — :func:`cross_operation`, each operation's key set knocked out on every operation;
* :mod:`.control` — :func:`random_control`, the key set against ≥ 100 depth-matched random sets of non-key heads;
* :mod:`.mlp_margin` — :func:`mlp_margin`, the later MLPs' answer margin with the key heads knocked out (C4);
* :mod:`.result` — :class:`KnockoutResult`, :class:`TransferRow`, :class:`TransferResult`.
"""

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
