"""Stage ``analyze`` — what key heads attend to, what MLPs read and write (values, not pictures)."""

from mathcircuits._checks import check_exports
from mathcircuits.analysis.attention import (
    ROLE_COLUMNS,
    AttentionByRole,
    AttentionSettings,
    HeadRole,
    attention_by_role,
)
from mathcircuits.analysis.mlp_probes import mlp_probes, number_tokens
from mathcircuits.analysis.patterns import HeadPatterns, head_patterns
from mathcircuits.analysis.probe_result import SPACES, MLPProbeResult, ProbeSettings, Space
from mathcircuits.analysis.roles import (
    HEAD_CLASSES,
    ROLE_GROUPS,
    ROLES,
    RoleGroup,
    classify_heads,
    role_masks,
    role_shares,
    sink_mask,
)

__all__ = [
    "HEAD_CLASSES",
    "ROLES",
    "ROLE_COLUMNS",
    "ROLE_GROUPS",
    "SPACES",
    "AttentionByRole",
    "AttentionSettings",
    "HeadRole",
    "HeadPatterns",
    "MLPProbeResult",
    "ProbeSettings",
    "RoleGroup",
    "Space",
    "attention_by_role",
    "classify_heads",
    "head_patterns",
    "mlp_probes",
    "number_tokens",
    "role_masks",
    "role_shares",
    "sink_mask",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
