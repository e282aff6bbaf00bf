"""Stage 3c — analysis: what key heads attend to, what MLPs read and write (values, not pictures)."""

from mathcircuits.analysis.attention import (
    HEAD_CLASSES,
    ROLES,
    AttentionByRole,
    HeadPatterns,
    attention_by_role,
    classify_heads,
    head_patterns,
    role_masks,
    role_shares,
)
from mathcircuits.analysis.mlp_probes import SPACES, MLPProbeResult, mlp_probes, number_tokens

__all__ = [
    "HEAD_CLASSES",
    "ROLES",
    "SPACES",
    "AttentionByRole",
    "HeadPatterns",
    "MLPProbeResult",
    "attention_by_role",
    "classify_heads",
    "head_patterns",
    "mlp_probes",
    "number_tokens",
    "role_masks",
    "role_shares",
]
