"""Stage ``analyze`` — what key heads attend to, what MLPs read and write (values, not pictures)."""

from mathcircuits._checks import check_exports
from mathcircuits.analysis.attention import AttentionByRole, AttentionSettings, attention_by_role
from mathcircuits.analysis.mlp_probes import mlp_probes
from mathcircuits.analysis.patterns import HeadPatterns, head_patterns
from mathcircuits.analysis.probe_result import MLPProbeResult, ProbeSettings, Space
from mathcircuits.analysis.roles import ROLES

__all__ = [
    "ROLES",
    "AttentionByRole",
    "AttentionSettings",
    "HeadPatterns",
    "MLPProbeResult",
    "ProbeSettings",
    "Space",
    "attention_by_role",
    "head_patterns",
    "mlp_probes",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
