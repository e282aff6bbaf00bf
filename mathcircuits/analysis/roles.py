"""Token roles of a prompt and the rule that classes a head by the roles it attends to (Zhang et al. 2024, §4.1).

Roles. Every position the last token sees gets exactly one role: ``operand_a``, ``operand_b`` (the
tokens of A and B in the query), ``operator`` (``{OP}``'s tokens), ``prefix`` (the few-shot examples,
``0 .. prefix_len-1``) or ``other`` (template words, ``=``, the last token itself). ``share[p, h, r]``
is the last position's attention mass on role *r*; the five shares sum to 1.

Classification rule (per head, over one operation's pairs or all). ``s_AB``, ``s_OP``: mean share on
``operand_a`` + ``operand_b`` and on ``operator``; ``b_AB``, ``b_OP``: the mean *token-count baselines*
uniform attention over the visible positions would give (``n_role / n_visible``); ``lift = s / b``:

* **operand head**: ``s_AB >= min_share`` and ``lift_AB >= min_lift`` and ``lift_AB >= lift_OP``;
* **operator head**: ``s_OP >= min_share`` and ``lift_OP >= min_lift`` and ``lift_OP > lift_AB``;
* **neither** otherwise.

Defaults ``min_share = 0.2``, ``min_lift = 2``: a fifth of the attention, twice uniform. Comparing lifts,
not raw shares, keeps a one-token operator on equal terms with two operands. The rule is a summary; the
per-pair shares are kept for the distributions.

The attention sink. Most heads park most attention on the first token (Xiao et al. 2024), here the start
of the prefix, as a no-op, so a head attending anywhere in the query beats them on any role.
:func:`sink_mask` names the sink positions (the prefix, and the first token when it has no role);
:meth:`~mathcircuits.analysis.AttentionByRole.sink_free` compares heads whatever their sink share.

Reference: W. Zhang et al., "Interpreting and Improving Large Language Models
in Arithmetic Calculation", ICML 2024 (arXiv 2409.01659), §4.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from mathcircuits._errors import FixableValueError

__all__ = [
    "ROLES",
]

ROLES = ("operand_a", "operand_b", "operator", "prefix", "other")
HEAD_CLASSES = ("operand", "operator", "neither")
A, B, OP, PREFIX, OTHER = range(5)  # the rows of ROLES
RoleGroup = Literal["operands", "operator"]
ROLE_GROUPS: tuple[RoleGroup, ...] = ("operands", "operator")  # A and B together; the operator


def role_masks(
    n_tokens: int, prefix_len: int, pos_a: Sequence[int], pos_b: Sequence[int], pos_op: Sequence[int]
) -> Bool[Tensor, "role seq"]:
    """One-hot role of each position, ``[role, seq]`` in :data:`ROLES` order; unassigned positions are ``"other"``.

    ``prefix_len`` covers positions ``0..prefix_len-1``. ValueError when a role has no position, a position
    falls outside the query, or two roles share a position.
    """
    masks = torch.zeros(len(ROLES), n_tokens, dtype=torch.bool)
    named = {"pos_a": (A, pos_a), "pos_b": (B, pos_b), "pos_op": (OP, pos_op)}
    for name, (role, positions) in named.items():
        if len(positions) == 0:
            raise FixableValueError(
                f"{name} is empty, so role {ROLES[role]!r} has no token. ",
                "regenerate the pairs; the template must contain that placeholder.",
            )
        for p in positions:
            if not prefix_len <= p < n_tokens:
                raise FixableValueError(
                    f"{name} holds position {p}, outside the query (positions {prefix_len}..{n_tokens - 1}). ",
                    "regenerate the pairs with the same tokenizer as the model.",
                )
            if masks[:, p].any():
                raise FixableValueError(
                    f"position {p} belongs to two roles ({ROLES[int(masks[:, p].nonzero()[0])]} and {ROLES[role]}). ",
                    "check the template's placeholders.",
                )
            masks[role, p] = True
    masks[PREFIX, :prefix_len] = True
    masks[OTHER] = ~masks[:OTHER].any(0)
    return masks


def role_shares(
    pattern_rows: Float[Tensor, "*batch seq"], masks: Bool[Tensor, "role seq"]
) -> Float[Tensor, "*batch role"]:
    """Attention mass of each row on each role (the rows are attention from one query position over the keys)."""
    return pattern_rows.float() @ masks.float().T


def sink_mask(masks: Bool[Tensor, "role seq"]) -> Bool[Tensor, " seq"]:
    """The attention-sink positions of a prompt: the few-shot prefix, and the first token when it has no role.

    Never an operand's or the operator's position.
    """
    sink = masks[PREFIX].clone()
    sink[0] |= bool(masks[OTHER, 0])
    return sink


def classify_heads(
    shares: Float[Tensor, "pair head role"],
    baselines: Float[Tensor, "pair role"],
    min_share: float = 0.2,
    min_lift: float = 2.0,
) -> tuple[str, ...]:
    """Operand / operator / neither for each head, by the rule in the module docstring.

    ``baselines``: each role's share of each pair's positions; ``min_share`` is a fraction (0..1), for
    operands a+b together or the operator; ``min_lift`` the least ratio of that share to the baseline.
    """
    s = shares.mean(0)  # head role
    b = baselines.mean(0)  # role
    s_ab, s_op = s[:, A] + s[:, B], s[:, OP]
    lift_ab, lift_op = s_ab / (b[A] + b[B]), s_op / b[OP]
    out = []
    for h in range(s.shape[0]):
        if s_ab[h] >= min_share and lift_ab[h] >= min_lift and lift_ab[h] >= lift_op[h]:
            out.append("operand")
        elif s_op[h] >= min_share and lift_op[h] >= min_lift and lift_op[h] > lift_ab[h]:
            out.append("operator")
        else:
            out.append("neither")
    return tuple(out)
