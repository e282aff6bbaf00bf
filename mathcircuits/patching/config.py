"""Settings of path patching and of key-component selection, as typed, self-checking configs.

They are a run's ``patching`` and ``selection`` sections, passed unchanged to
:func:`~mathcircuits.patching.path_patch` and :func:`~mathcircuits.patching.select_key_components`:
the same ``Literal`` aliases type both, and each default lives here. A test keeps the metric choices
equal to ``METRICS``' keys and the rules to ``RULES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from mathcircuits._schema import check_fields, setting
from mathcircuits.patching.metrics import MetricName
from mathcircuits.patching.plan import parse_bytes
from mathcircuits.patching.scan import Method, SenderKind

__all__ = ["PatchingConfig", "Rule", "SelectionConfig", "ThresholdOf"]

#: The key-head selection rules (the ``rule`` choices of ``select_key_components`` and ``SelectionConfig``).
Rule: TypeAlias = Literal["zscore", "threshold", "topk"]
#: What the ``threshold`` rule compares with its threshold: a head's effect as a share of the total effect, or
#: the effect in the metric's own units.
ThresholdOf: TypeAlias = Literal["share", "effect"]


@dataclass(frozen=True)
class PatchingConfig:
    """How to path-patch every head and MLP to the logits (paper §3.2)."""

    method: Method = setting(
        "exact", "exact: last-position shortcut; reference: one forward per sender; attribution: gradient estimate"
    )
    metric: MetricName = setting(
        "answer_logprob",
        "answer_logprob: change of the whole answer's teacher-forced log-probability (offset-free, what knockout "
        "scores); relative_logit: the paper's (patched - clean) / clean first-token logit (rows with a clean logit "
        "<= 1 excluded and counted); logit_diff; prob_change",
    )
    senders: tuple[SenderKind, ...] = setting(("heads", "mlps"), "which components to patch")
    max_pairs: int = setting(
        64, "correct pairs patched per operation", ge=1, le=100_000, why="each pair is patched once per head and MLP"
    )
    min_pairs: int = setting(30, "an operation with fewer correct pairs is reported but not patched", ge=1)
    batch_size: int = setting(16, "pairs per forward pass", ge=1)
    max_memory: str = setting(
        "", "working memory the scan may use beyond the weights, e.g. '8GB': picks batch and MLP chunk ('': off)"
    )

    def __post_init__(self) -> None:
        check_fields(self)
        if self.max_memory:
            parse_bytes(self.max_memory)  # a typo fails when the config loads


@dataclass(frozen=True)
class SelectionConfig:
    """How to pick the key heads (and MLPs) from the patching effects."""

    rule: Rule = setting(
        "zscore", "zscore: effects z below the mean; threshold: effect below `threshold`; topk: the k strongest"
    )
    threshold: float = setting(-0.05, "rule threshold: the paper's -5%, in the units of `threshold_of`")
    threshold_of: ThresholdOf = setting(
        "share",
        "rule threshold compares with: share: the head's effect / |total effect| (counterfactual vs clean; "
        "-0.05 = 5% of the total, meaningful under every metric); effect: the effect in the metric's units "
        "(the paper's rule when metric is relative_logit)",
    )
    k: int = setting(10, "rule topk: number of heads (also the fallback when a rule selects none)", ge=1)
    z: float = setting(3.0, "rule zscore: standard deviations below the mean", gt=0)
    max_k: int = setting(32, "at most this many heads for zscore/threshold", ge=1)
    mlp_k: int = setting(2, "key MLPs (the strongest mlp_k)", ge=0)

    def __post_init__(self) -> None:
        check_fields(self)
