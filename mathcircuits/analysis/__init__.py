"""Stage 3c — analysis: what key heads attend to, what MLPs read and write (values, not pictures)."""

from mathcircuits.analysis.attention import (
    HEAD_CLASSES,
    ROLES,
    AttentionByRole,
    attention_by_role,
    classify_heads,
    role_masks,
    role_shares,
)
from mathcircuits.analysis.mlp_probes import SPACES, MLPProbeResult, mlp_probes, number_tokens
from mathcircuits.analysis.patterns import HeadPatterns, head_patterns

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
