"""Where key heads look: attention from the last position to each token role.

Zhang et al. (2024, §4.1) find that the heads that matter for arithmetic attend from the final position
either to the **operands** or to the **operator** (operand and operator heads). This measures that for
any heads on any template, from the positions the data stage recorded (``pos_a``, ``pos_b``, ``pos_op``,
``prefix_len``).

Intervals: each head's mean share on a role, and its *excess* over the uniform baseline (per pair, so
prompt length cancels), carry a bootstrap interval (:func:`mathcircuits.stats.bootstrap.mean_interval`). The sink
share is recorded too; :meth:`AttentionByRole.sink_free` gives the shares of the rest, which claim C3
compares between key heads and their layer-mates.

Usage::

    res = attention_by_role(model, correct_pairs, key_components)
    res.classify()                    # ('operand', 'operator', 'neither', ...)
    res.summary()                     # mean share per head x role, lifts, class

Reference: W. Zhang et al., "Interpreting and Improving Large Language Models
in Arithmetic Calculation", ICML 2024 (arXiv 2409.01659), §4.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits._progress import progress_bar
from mathcircuits.analysis.roles import OP, ROLES, A, B, classify_heads, role_masks, role_shares, sink_mask
from mathcircuits.data import Operation
from mathcircuits.data.pairs import operation_rows
from mathcircuits.data.pairset import Field, PairSet
from mathcircuits.models import Head, HookedModel, PrefixCaches, hooks
from mathcircuits.models.spec import ModelSpec
from mathcircuits.patching import KeyComponents
from mathcircuits.patching.key_components import resolve_heads
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.bootstrap import mean_interval
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY

__all__ = [
    "AttentionByRole",
    "AttentionSettings",
    "attention_by_role",
]


@dataclass(frozen=True)
class AttentionSettings:
    """How the attention was measured: pairs per forward pass."""

    batch_size: int = 16


@dataclass(frozen=True)
class HeadRole:
    """One head over all pairs: its class, and its attention on the operands and on the operator in excess of
    uniform attention's (per pair, so prompt length cancels), each with its interval over the pairs."""

    head: Head
    head_class: str
    excess_operands: Interval
    excess_operator: Interval


@dataclass(frozen=True, repr=False)
class AttentionByRole(SavedResult):
    """Attention of key heads from the last position to each token role, per pair.

    ``shares[p, i, r]``: pair *p*, head ``heads[i]``, role ``ROLES[r]`` (rows sum to 1).
    ``baselines[p, r]``: the share uniform attention would give (``n_role / n_visible``).
    ``sink[p, i]``: the share on the sink positions; ``sink_baselines[p]``: theirs under uniform attention
    (both None in files written before the sink was measured).
    """

    heads: tuple[Head, ...]
    shares: Float[Tensor, "pair head role"]
    baselines: Float[Tensor, "pair role"]
    operations: list[str]
    pair_ids: list[int]
    template_ids: list[str]
    model: ModelSpec
    roles: tuple[str, ...] = ROLES
    min_share: float = 0.2
    min_lift: float = 2.0
    settings: AttentionSettings = AttentionSettings()
    sink: Float[Tensor, "pair head"] | None = None
    sink_baselines: Float[Tensor, " pair"] | None = None

    STAGE = "analyze"
    VERSION = 3

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", tuple(Head.of(h) for h in self.heads))
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
        if (self.sink is None) != (self.sink_baselines is None) or (
            self.sink is not None and (self.sink.shape != (n, len(self.heads)) or self.sink_baselines.shape != (n,))  # type: ignore[union-attr]
        ):
            raise FixableValueError(
                "AttentionByRole's sink and sink_baselines must both be given, of shapes [pair, head] and [pair]. ",
                "build it with attention_by_role().",
            )

    @property
    def labels(self) -> list[str]:
        return [str(h) for h in self.heads]

    def operation_names(self) -> list[str]:
        return list(dict.fromkeys(self.operations))

    def _rows(self, operation: Operation | None) -> Tensor:
        return operation_rows(self.operations, operation)

    def mean(self, operation: Operation | None = None) -> Float[Tensor, "head role"]:
        """Mean share per head and role over the pairs of ``operation`` (all pairs when None)."""
        return self.shares[self._rows(operation)].mean(0)

    def classify(
        self, operation: Operation | None = None, min_share: float | None = None, min_lift: float | None = None
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
        """Per pair (rows ``idx``) and head: operands share, operator share, and each minus its uniform baseline."""
        s, b = self.shares[idx], self.baselines[idx]
        ab, op = s[..., A] + s[..., B], s[..., OP]
        b_ab, b_op = (b[:, A] + b[:, B])[:, None], b[:, OP][:, None]
        return torch.stack([ab, op, ab - b_ab, op - b_op], -1)

    def sink_free(self) -> tuple[Float[Tensor, "pair head group"], Float[Tensor, "pair group"]]:
        """Shares of the attention *off* the sink on the operands (A+B) and the operator, and uniform attention's.

        ``share / (1 − sink share)``, so heads with different sink shares compare; NaN where a head puts (almost)
        all its attention on the sink. Groups in :data:`~mathcircuits.analysis.roles.ROLE_GROUPS` order.
        ValueError for a result without sink measurement (files before version 3).
        """
        if self.sink is None or self.sink_baselines is None:
            raise FixableValueError(
                "this attention result has no sink measurement (written before version 3). ",
                "re-run analyze (`mathcircuits analyze --force`).",
            )
        s, b = self.shares, self.baselines
        grouped = torch.stack([s[..., A] + s[..., B], s[..., OP]], -1)
        rest = (1 - self.sink).unsqueeze(-1)
        shares = torch.where(rest > 1e-6, grouped / rest.clamp(min=1e-6), torch.full_like(grouped, float("nan")))
        base = torch.stack([b[:, A] + b[:, B], b[:, OP]], -1) / (1 - self.sink_baselines).unsqueeze(-1)
        return shares, base

    def head_roles(self, uncertainty: Uncertainty = DEFAULT_UNCERTAINTY) -> tuple[HeadRole, ...]:
        """Each head's class and excess attention on operands and operator over all pairs, as in :meth:`summary`'s
        ``all`` rows (the interval bootstraps templates within operations when each has enough, else pairs)."""
        idx = self._rows(None)
        grouped = self.grouped(idx)
        templates = [self.template_ids[i] for i in idx.tolist()]
        ops = [self.operations[i] for i in idx.tolist()]
        lo, hi, method = mean_interval(grouped, templates, ops, uncertainty)
        g, n, (conf, seed) = grouped.mean(0), len(idx), (uncertainty.confidence, uncertainty.seed)

        def iv(i: int, j: int) -> Interval:
            return Interval(float(g[i, j]), float(lo[i, j]), float(hi[i, j]), n, conf, method, seed)

        classes = self.classify()
        return tuple(HeadRole(h, classes[i], iv(i, 2), iv(i, 3)) for i, h in enumerate(self.heads))

    def summary(
        self,
        by_operation: bool = True,
        uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
    ):
        """One row per head (and operation): mean share per role with its interval, baselines, lifts, the
        excess over the uniform baseline on operands and operator with its interval, and the class.

        Intervals bootstrap templates within operations when each has enough, else pairs (column ``interval``);
        ``sink`` is the mean share on the sink.
        """

        groups: list[str | None] = [None] + (self.operation_names() if by_operation else [])
        rows = []
        for op in groups:
            idx = self._rows(op)
            s, b = self.shares[idx].mean(0), self.baselines[idx].mean(0)
            templates = [self.template_ids[i] for i in idx.tolist()]
            ops = [self.operations[i] for i in idx.tolist()]
            s_lo, s_hi, method = mean_interval(self.shares[idx], templates, ops, uncertainty)
            grouped = self.grouped(idx)
            g_lo, g_hi, _ = mean_interval(grouped, templates, ops, uncertainty)
            g = grouped.mean(0)
            sink = (
                self.sink[idx].mean(0)
                if self.sink is not None
                else torch.full((len(self.heads),), float("nan"), device="cpu")
            )
            classes = self.classify(op)
            for i, (layer, head) in enumerate(self.heads):
                row: dict[str, Any] = {
                    "operation": op or "all",
                    "layer": layer,
                    "head": head,
                    "component": str(Head(layer, head)),
                    "n_pairs": len(idx),
                    "interval": method,
                }
                for j, r in enumerate(self.roles):
                    row.update({r: float(s[i, j]), f"{r}_low": float(s_lo[i, j]), f"{r}_high": float(s_hi[i, j])})
                s_ab, b_ab = float(s[i, A] + s[i, B]), float(b[A] + b[B])
                row.update(
                    {
                        "operands": s_ab,
                        "operands_low": float(g_lo[i, 0]),
                        "operands_high": float(g_hi[i, 0]),
                        "baseline_operands": b_ab,
                        "baseline_operator": float(b[OP]),
                        "excess_operands": float(g[i, 2]),
                        "excess_operands_low": float(g_lo[i, 2]),
                        "excess_operands_high": float(g_hi[i, 2]),
                        "excess_operator": float(g[i, 3]),
                        "excess_operator_low": float(g_lo[i, 3]),
                        "excess_operator_high": float(g_hi[i, 3]),
                        "lift_operands": s_ab / b_ab,
                        "lift_operator": float(s[i, OP] / b[OP]),
                        "class": classes[i],
                        "sink": float(sink[i]),
                    }
                )
                rows.append(row)
        return pd.DataFrame(rows)

    def to_dataframe(self):
        """Long form: one row per pair x head x role: share, uniform baseline and the head's overall class."""

        classes = self.classify()
        n_pairs, n_heads, n_roles = self.shares.shape
        p, h, r = torch.meshgrid(
            torch.arange(n_pairs, device="cpu"),
            torch.arange(n_heads, device="cpu"),
            torch.arange(n_roles, device="cpu"),
            indexing="ij",
        )
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

    def summary_items(self) -> list[tuple[str, str]]:
        """Model, pairs, and each head with its class (operand / operator / neither)."""
        classes = ", ".join(f"{label} {c}" for label, c in zip(self.labels, self.classify()))
        return [("model", self.model.name), ("pairs", str(len(self.pair_ids))), ("heads", classes)]


ROLE_COLUMNS: tuple[Field, ...] = (
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
    model: HookedModel,
    pairs: PairSet,
    heads: KeyComponents | Sequence[tuple[int, int]],
    batch_size: int = 16,
    min_share: float = 0.2,
    min_lift: float = 2.0,
    progress: bool | None = None,
) -> AttentionByRole:
    """Measure each head's attention from the last position to the token roles, for every pair.

    ``pairs``: pairs with the ``ROLE_COLUMNS`` (usually the correct ones). Only the last query row of each
    pattern is kept. ``min_share`` (fraction) and ``min_lift`` are the classification rule's
    (:mod:`.roles`). Refused: a pair whose ``pos_last`` is not its last token, no or repeated heads, invalid
    role positions (:func:`role_masks`). ``progress``: a bar on stderr (None: on unless ``MATHCIRCUITS_PROGRESS=0``).
    """
    spec = model.spec
    heads_t = resolve_heads(heads, spec)
    pairs.require(ROLE_COLUMNS, "attention_by_role")
    pairs.require_model(model, "attention_by_role")
    n = len(pairs)
    by_layer: dict[int, list[int]] = {}
    for i, (layer, _head) in enumerate(heads_t):
        by_layer.setdefault(layer, []).append(i)
    masks = []
    for i in range(n):
        if pairs.pos_last[i] != pairs.n_tokens[i] - 1:
            raise FixableValueError(
                f"pair {pairs.pair_ids[i]}: pos_last {pairs.pos_last[i]} is not the last token "
                f"({pairs.n_tokens[i] - 1}). ",
                "regenerate the pairs.",
            )
        masks.append(
            role_masks(pairs.n_tokens[i], pairs.prefix_len[i], pairs.pos_a[i], pairs.pos_b[i], pairs.pos_op[i])
        )
    shares = torch.zeros(n, len(heads_t), len(ROLES), device="cpu")
    sink = torch.zeros(n, len(heads_t), device="cpu")
    baselines = torch.stack([m.float().sum(1) / m.shape[1] for m in masks])
    sinks = [sink_mask(m) for m in masks]
    sink_baselines = torch.stack([s.float().mean() for s in sinks])
    prefixes: PrefixCaches = {}  # clean prefix KV caches, shared by the batches of a template
    batches = list(pairs.prompt_batches(batch_size, model.device))  # token ids only: the bar knows its length
    desc = f"reading the attention of {len(heads_t)} heads on {n} pairs"
    for idx, toks in progress_bar(progress, desc, iterable=batches):
        rows: dict[int, Tensor] = {}

        def keep_last_row(layer: int, rows: dict[int, Tensor] = rows):  # bound now: the loop rebinds `rows`
            def hook_fn(pattern: Tensor, hook: Any) -> None:
                rows[layer] = pattern[:, [heads_t[i][1] for i in by_layer[layer]], -1, :].detach().float().cpu()

            return hook_fn

        # only the last query row is read: the shared prefix runs once (its keys stay in the pattern's row)
        fwd = [(hooks.pattern(layer), keep_last_row(layer)) for layer in by_layer]
        model.prefix_cached(fwd, store=prefixes).logits_from(toks, toks.shape[1] - 1)
        for layer, head_idx in by_layer.items():
            for b, i in enumerate(idx):
                shares[i, head_idx] = role_shares(rows[layer][b], masks[i])
                sink[i, head_idx] = rows[layer][b] @ sinks[i].float()
    return AttentionByRole(
        heads=heads_t,
        shares=shares,
        baselines=baselines,
        operations=list(pairs.operations),
        pair_ids=[int(x) for x in pairs.pair_ids],
        template_ids=list(pairs.template_ids),
        model=spec,
        min_share=min_share,
        min_lift=min_lift,
        settings=AttentionSettings(batch_size=batch_size),
        sink=sink,
        sink_baselines=sink_baselines,
    )
