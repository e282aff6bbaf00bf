"""Where key heads look: attention from the last position to each token role.

Background. Zhang et al. (2024, §4.1) find that the few heads that matter for
arithmetic attend from the final position (where the answer is predicted)
either to the **operands** or to the **operator**, and call them operand
heads and operator heads. This module measures that for any set of heads on
any template, using the token positions the data stage recorded for each
prompt (``pos_a``, ``pos_b``, ``pos_op``, ``prefix_len``).

Roles. Every position the last token can see (all of them: attention is
causal and the last token is last) gets exactly one role:

* ``operand_a``, ``operand_b``: the tokens of A and B in the query;
* ``operator``: the tokens of the operator word or symbol (``{OP}``);
* ``prefix``: the few-shot examples before the query (``0 .. prefix_len-1``);
* ``other``: everything else (template words, ``=``, the last token itself).

For pair *p* and head *h*, ``share[p, h, r]`` is the attention mass of the last
position on the tokens of role *r*; the five shares sum to 1.

Classification rule (per head, over the pairs of one operation or all pairs).
Let ``s_AB`` be the mean share on ``operand_a`` + ``operand_b`` and ``s_OP`` the
mean share on ``operator``; let ``b_AB`` and ``b_OP`` be the mean *token-count
baselines*, the shares a head attending uniformly over the visible positions
would give (``n_role / n_visible``), and ``lift = s / b``. Then a head is

* an **operand head** when ``s_AB >= min_share`` and ``lift_AB >= min_lift``
  and ``lift_AB >= lift_OP``;
* an **operator head** when ``s_OP >= min_share`` and ``lift_OP >= min_lift``
  and ``lift_OP > lift_AB``;
* **neither** otherwise.

Defaults ``min_share = 0.2``, ``min_lift = 2``: a fifth of the head's attention,
at least twice what uniform attention would put there. Comparing lifts (not
raw shares) keeps a one-token operator on equal terms with two operands. The
rule is a summary; the per-pair shares are kept for the distributions.

Intervals. Each head's mean share on a role, and its *excess* over the uniform
baseline (``mean over pairs of share − baseline``, per pair so that prompt length
cancels), carry a percentile-bootstrap interval over pairs
(:func:`mathcircuits.stats.bootstrap_mean`; ``n_boot`` resamples, seed ``seed``).
:meth:`AttentionByRole.summary` has them as ``<role>_low``/``<role>_high`` and
``excess_operands``/``excess_operator`` with their bounds; claim C3 reads the excess.

Usage::

    res = attention_by_role(model, correct_pairs, key_components)
    res.classify()                    # ('operand', 'operator', 'neither', ...)
    res.summary()                     # mean share per head x role, lifts, class

Reference: W. Zhang et al., "Interpreting and Improving Large Language Models
in Arithmetic Calculation", ICML 2024 (arXiv 2409.01659), §4.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from mathcircuits._io import SavedResult
from mathcircuits.analysis._common import as_heads, columns, operation_rows, spec_dict
from mathcircuits.data.batching import iter_batches
from mathcircuits.models import hooks
from mathcircuits.models.prefix import PrefixRunner
from mathcircuits.models.spec import ModelSpec, as_spec
from mathcircuits.stats import DEFAULT_CONFIDENCE, DEFAULT_N_BOOT, bootstrap_mean

__all__ = [
    "ROLES",
    "ROLE_COLUMNS",
    "HEAD_CLASSES",
    "AttentionByRole",
    "attention_by_role",
    "classify_heads",
    "role_masks",
    "role_shares",
]

ROLES = ("operand_a", "operand_b", "operator", "prefix", "other")
HEAD_CLASSES = ("operand", "operator", "neither")
_A, _B, _OP, _PREFIX, _OTHER = range(5)


def role_masks(
    n_tokens: int, prefix_len: int, pos_a: Sequence[int], pos_b: Sequence[int], pos_op: Sequence[int]
) -> Bool[Tensor, "role seq"]:
    """One-hot role of each position (rows in :data:`ROLES` order).

    Raises if roles overlap or fall outside the prompt.

    Args:
        n_tokens: number of tokens in the prompt (few-shot prefix included).
        prefix_len: number of few-shot prefix tokens (positions ``0..prefix_len-1``).
        pos_a: positions of operand a's tokens.
        pos_b: positions of operand b's tokens.
        pos_op: positions of the operator's tokens.

    Returns:
        Boolean mask of shape ``[role, seq]`` (``[5, n_tokens]``): exactly one role is True per position;
        positions that are neither prefix nor an operand/operator are ``"other"``.

    Raises:
        ValueError: if a role has no position, a position falls outside the query, or two roles share a position.
    """
    masks = torch.zeros(len(ROLES), n_tokens, dtype=torch.bool)
    named = {"pos_a": (_A, pos_a), "pos_b": (_B, pos_b), "pos_op": (_OP, pos_op)}
    for name, (role, positions) in named.items():
        if len(positions) == 0:
            raise ValueError(
                f"{name} is empty, so role {ROLES[role]!r} has no token. Fix: regenerate the pairs; the template "
                "must contain that placeholder."
            )
        for p in positions:
            if not prefix_len <= p < n_tokens:
                raise ValueError(
                    f"{name} holds position {p}, outside the query (positions {prefix_len}..{n_tokens - 1}). "
                    "Fix: regenerate the pairs with the same tokenizer as the model."
                )
            if masks[:, p].any():
                raise ValueError(
                    f"position {p} belongs to two roles ({ROLES[int(masks[:, p].nonzero()[0])]} and {ROLES[role]}). "
                    "Fix: check the template's placeholders."
                )
            masks[role, p] = True
    masks[_PREFIX, :prefix_len] = True
    masks[_OTHER] = ~masks[:_OTHER].any(0)
    return masks


def role_shares(
    pattern_rows: Float[Tensor, "*batch seq"], masks: Bool[Tensor, "role seq"]
) -> Float[Tensor, "*batch role"]:
    """Attention mass of each row on each role (the rows are attention from one query position).

    Args:
        pattern_rows: attention weights from one query position over the keys, shape ``[*batch, seq]``.
        masks: role masks from :func:`role_masks`, shape ``[role, seq]``.

    Returns:
        Float tensor of shape ``[*batch, role]``: the summed attention on each role's positions.
    """
    return pattern_rows.float() @ masks.float().T


def classify_heads(
    shares: Float[Tensor, "pair head role"],
    baselines: Float[Tensor, "pair role"],
    min_share: float = 0.2,
    min_lift: float = 2.0,
) -> tuple[str, ...]:
    """Operand / operator / neither for each head, by the rule in the module docstring.

    Args:
        shares: attention share of each pair's last position on each role, shape ``[pair, head, role]``.
        baselines: each role's share of the positions of each pair, shape ``[pair, role]``.
        min_share: least mean share (operands a+b together, or operator) for a class (fraction, 0..1).
        min_lift: least ratio of that mean share to the mean baseline.

    Returns:
        One of ``"operand"``, ``"operator"`` or ``"neither"`` per head, in the order of ``shares``' head axis.
    """
    s = shares.mean(0)  # head role
    b = baselines.mean(0)  # role
    s_ab, s_op = s[:, _A] + s[:, _B], s[:, _OP]
    lift_ab, lift_op = s_ab / (b[_A] + b[_B]), s_op / b[_OP]
    out = []
    for h in range(s.shape[0]):
        if s_ab[h] >= min_share and lift_ab[h] >= min_lift and lift_ab[h] >= lift_op[h]:
            out.append("operand")
        elif s_op[h] >= min_share and lift_op[h] >= min_lift and lift_op[h] > lift_ab[h]:
            out.append("operator")
        else:
            out.append("neither")
    return tuple(out)


@dataclass(frozen=True)
class AttentionByRole(SavedResult):
    """Attention of key heads from the last position to each token role, per pair.

    ``shares[p, i, r]``: pair *p*, head ``heads[i]``, role ``ROLES[r]`` (rows sum to 1).
    ``baselines[p, r]``: the share uniform attention would give (``n_role / n_visible``).
    """

    heads: tuple[tuple[int, int], ...]
    shares: Float[Tensor, "pair head role"]
    baselines: Float[Tensor, "pair role"]
    operations: list[str]
    pair_ids: list[int]
    template_ids: list[str]
    model: ModelSpec | dict[str, Any]  # a dict from ModelSpec.to_dict() is converted
    roles: tuple[str, ...] = ROLES
    min_share: float = 0.2
    min_lift: float = 2.0
    settings: dict[str, Any] = field(default_factory=dict)

    STAGE = "analyze"

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", as_spec(self.model))
        n = self.shares.shape[0]
        if not (len(self.operations) == len(self.pair_ids) == len(self.template_ids) == n):
            raise ValueError(
                f"AttentionByRole has {n} pairs of shares but {len(self.operations)} operations / "
                f"{len(self.pair_ids)} pair ids."
            )
        if self.shares.shape[1:] != (len(self.heads), len(self.roles)) or self.baselines.shape != (n, len(self.roles)):
            raise ValueError(
                f"AttentionByRole shapes disagree: shares {tuple(self.shares.shape)} and baselines "
                f"{tuple(self.baselines.shape)} "
                f"for {n} pairs, {len(self.heads)} heads and {len(self.roles)} roles."
            )

    @property
    def labels(self) -> list[str]:
        return [f"L{l}.H{h}" for l, h in self.heads]

    def operation_names(self) -> list[str]:
        return list(dict.fromkeys(self.operations))

    def _rows(self, operation: str | None) -> Tensor:
        return operation_rows(self.operations, operation)

    def mean(self, operation: str | None = None) -> Float[Tensor, "head role"]:
        """Mean share per head and role over the pairs of ``operation`` (all pairs when None)."""
        return self.shares[self._rows(operation)].mean(0)

    def classify(
        self, operation: str | None = None, min_share: float | None = None, min_lift: float | None = None
    ) -> tuple[str, ...]:
        """Class of each head (:data:`HEAD_CLASSES`) over the pairs of ``operation`` (all when None)."""
        rows = self._rows(operation)
        return classify_heads(
            self.shares[rows],
            self.baselines[rows],
            self.min_share if min_share is None else min_share,
            self.min_lift if min_lift is None else min_lift,
        )

    def grouped(self, idx: Tensor) -> Float[Tensor, "pair head target"]:
        """Per pair and head: share on operands (A+B) and operator, and each minus its uniform baseline.

        Args:
            idx: the pair rows to take.

        Returns:
            ``[pair, head, 4]``: operands share, operator share, operands excess, operator excess.
        """
        s, b = self.shares[idx], self.baselines[idx]
        ab, op = s[..., _A] + s[..., _B], s[..., _OP]
        b_ab, b_op = (b[:, _A] + b[:, _B])[:, None], b[:, _OP][:, None]
        return torch.stack([ab, op, ab - b_ab, op - b_op], -1)

    def summary(
        self,
        by_operation: bool = True,
        n_boot: int = DEFAULT_N_BOOT,
        seed: int = 0,
        confidence: float = DEFAULT_CONFIDENCE,
    ):
        """One row per head (and operation): mean share per role with its interval, baselines, lifts, the
        excess over the uniform baseline on operands and operator with its interval, and the class.

        Args:
            by_operation: add rows per operation after the rows over all pairs.
            n_boot: bootstrap resamples of the pairs for the intervals.
            seed: bootstrap seed.
            confidence: the intervals' level.

        Returns:
            A DataFrame; interval columns end in ``_low``/``_high``.
        """

        groups: list[str | None] = [None] + (self.operation_names() if by_operation else [])
        rows = []
        for op in groups:
            idx = self._rows(op)
            s, b = self.shares[idx].mean(0), self.baselines[idx].mean(0)
            s_lo, s_hi = bootstrap_mean(self.shares[idx], n_boot, seed, confidence)
            grouped = self.grouped(idx)
            g, (g_lo, g_hi) = grouped.mean(0), bootstrap_mean(grouped, n_boot, seed, confidence)
            classes = self.classify(op)
            for i, (layer, head) in enumerate(self.heads):
                row: dict[str, Any] = {
                    "operation": op or "all",
                    "layer": layer,
                    "head": head,
                    "component": f"L{layer}.H{head}",
                    "n_pairs": len(idx),
                }
                for j, r in enumerate(self.roles):
                    row.update({r: float(s[i, j]), f"{r}_low": float(s_lo[i, j]), f"{r}_high": float(s_hi[i, j])})
                s_ab, b_ab = float(s[i, _A] + s[i, _B]), float(b[_A] + b[_B])
                row.update(
                    {
                        "operands": s_ab,
                        "operands_low": float(g_lo[i, 0]),
                        "operands_high": float(g_hi[i, 0]),
                        "baseline_operands": b_ab,
                        "baseline_operator": float(b[_OP]),
                        "excess_operands": float(g[i, 2]),
                        "excess_operands_low": float(g_lo[i, 2]),
                        "excess_operands_high": float(g_hi[i, 2]),
                        "excess_operator": float(g[i, 3]),
                        "excess_operator_low": float(g_lo[i, 3]),
                        "excess_operator_high": float(g_hi[i, 3]),
                        "lift_operands": s_ab / b_ab,
                        "lift_operator": float(s[i, _OP] / b[_OP]),
                        "class": classes[i],
                    }
                )
                rows.append(row)
        return pd.DataFrame(rows)

    def to_dataframe(self):
        """Long form: one row per pair x head x role.

        Columns: the share, the uniform baseline and the head's overall class.
        """

        classes = self.classify()
        n_pairs, n_heads, n_roles = self.shares.shape
        p, h, r = torch.meshgrid(torch.arange(n_pairs), torch.arange(n_heads), torch.arange(n_roles), indexing="ij")
        p, h, r = p.flatten().tolist(), h.flatten().tolist(), r.flatten().tolist()
        return pd.DataFrame(
            {
                "pair_id": [self.pair_ids[i] for i in p],
                "operation": [self.operations[i] for i in p],
                "template_id": [self.template_ids[i] for i in p],
                "layer": [self.heads[i][0] for i in h],
                "head": [self.heads[i][1] for i in h],
                "component": [self.labels[i] for i in h],
                "head_class": [classes[i] for i in h],
                "role": [self.roles[i] for i in r],
                "attention": self.shares.flatten().tolist(),
                "baseline": self.baselines[p, r].tolist(),
            }
        )


ROLE_COLUMNS = (
    "tokens",
    "n_tokens",
    "prefix_len",
    "pos_a",
    "pos_b",
    "pos_op",
    "pos_last",
    "operation",
    "pair_id",
    "template_id",
)


@torch.no_grad()
def attention_by_role(
    model: Any,
    dataset: Any,
    heads: Any,
    batch_size: int = 16,
    min_share: float = 0.2,
    min_lift: float = 2.0,
) -> AttentionByRole:
    """Measure each head's attention from the last position to the token roles, for every pair.

    ``model`` is a :class:`~mathcircuits.models.HookedModel`; ``dataset`` has the
    columns of :func:`mathcircuits.data.generate_pairs` (usually its correct pairs);
    ``heads`` is a :class:`~mathcircuits.patching.selection.KeyComponents` or a list
    of ``(layer, head)``. Only the last query row of each pattern is kept.

    Args:
        model: the :class:`~mathcircuits.models.HookedModel` to run.
        dataset: a ``datasets.Dataset`` (or list of row dicts) with the columns in ``ROLE_COLUMNS``.
        heads: the heads to measure: a ``KeyComponents`` or a list of ``(layer, head)``.
        batch_size: pairs per forward pass (batches are grouped by ``template_id``).
        min_share: least mean attention share on a role for a head to be classed by it (fraction, 0..1).
        min_lift: least ratio of that share to the role's uniform baseline share.

    Returns:
        An :class:`AttentionByRole` with ``shares`` of shape ``[pair, head, role]``, ``baselines`` of shape
        ``[pair, role]`` (each role's share of the positions), and the heads, operations, pair and template ids.

    Raises:
        ValueError: if a pair's ``pos_last`` is not its last token, columns are missing or the dataset is empty,
            ``heads`` is empty or has duplicates, or the role positions are invalid (see :func:`role_masks`).
    """
    spec = model.spec
    heads_t = as_heads(heads, spec)
    cols = columns(dataset, ROLE_COLUMNS)
    n = len(cols["tokens"])
    by_layer: dict[int, list[int]] = {}
    for i, (layer, _head) in enumerate(heads_t):
        by_layer.setdefault(layer, []).append(i)
    masks = []
    for i in range(n):
        if cols["pos_last"][i] != cols["n_tokens"][i] - 1:
            raise ValueError(
                f"pair {cols['pair_id'][i]}: pos_last {cols['pos_last'][i]} is not the last token "
                f"({cols['n_tokens'][i] - 1}). Fix: regenerate the pairs."
            )
        masks.append(
            role_masks(
                cols["n_tokens"][i], cols["prefix_len"][i], cols["pos_a"][i], cols["pos_b"][i], cols["pos_op"][i]
            )
        )
    shares = torch.zeros(n, len(heads_t), len(ROLES))
    baselines = torch.stack([m.float().sum(1) / m.shape[1] for m in masks])
    by_template = {"tokens": cols["tokens"], "template_id": cols["template_id"]}
    prefixes: dict[tuple[int, ...], Any] = {}  # clean prefix KV caches, shared by the batches of a template
    for idx, batch in iter_batches(by_template, batch_size, model.device, group_by="template_id"):
        toks = batch["tokens"]
        rows: dict[int, Tensor] = {}

        def keep_last_row(layer: int, rows: dict[int, Tensor] = rows):  # bound now: the loop rebinds `rows`
            def hook_fn(pattern: Tensor, hook: Any) -> None:
                rows[layer] = pattern[:, [heads_t[i][1] for i in by_layer[layer]], -1, :].detach().float().cpu()

            return hook_fn

        # only the last query row is read: the shared prefix runs once (its keys stay in the pattern's row)
        fwd = [(hooks.pattern(layer), keep_last_row(layer)) for layer in by_layer]
        PrefixRunner(model.bridge, fwd, store=prefixes).logits_from(toks, toks.shape[1] - 1)
        for layer, head_idx in by_layer.items():
            for b, i in enumerate(idx):
                shares[i, head_idx] = role_shares(rows[layer][b], masks[i])
    return AttentionByRole(
        heads=heads_t,
        shares=shares,
        baselines=baselines,
        operations=list(cols["operation"]),
        pair_ids=[int(x) for x in cols["pair_id"]],
        template_ids=list(cols["template_id"]),
        model=spec_dict(model),
        min_share=min_share,
        min_lift=min_lift,
        settings={"batch_size": batch_size},
    )
