"""Full attention patterns of a few heads on a few prompts, for the CircuitsVis views.

With each token's text and role (:mod:`mathcircuits.analysis.attention`), so a figure can colour tokens
by role.

Usage::

    pats = head_patterns(model, correct_pairs, key_components, rows=[0], drop_prefix=True)
    mathcircuits.viz.attention_heads_view(pats)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from torch import Tensor

from mathcircuits._errors import FixableIndexError
from mathcircuits._io import SavedResult
from mathcircuits.analysis.attention import ROLE_COLUMNS
from mathcircuits.analysis.roles import ROLES, role_masks
from mathcircuits.data.pairs import token_strings
from mathcircuits.data.pairset import PairSet
from mathcircuits.models import Head, HookedModel, hooks
from mathcircuits.models.spec import ModelSpec
from mathcircuits.patching import KeyComponents
from mathcircuits.patching.key_components import resolve_heads

__all__ = ["HeadPatterns", "head_patterns"]


@dataclass(frozen=True, repr=False)
class HeadPatterns(SavedResult):
    """Full attention patterns of some heads on a few prompts, for the CircuitsVis views.

    ``patterns[k]`` is ``[head, seq, seq]`` for prompt *k* (prompts may differ in length);
    ``tokens[k]`` its token texts and ``roles[k]`` the role of each token.
    """

    heads: tuple[Head, ...]
    prompts: list[str]
    tokens: list[list[str]]
    roles: list[list[str]]
    patterns: list[Tensor]
    pair_ids: list[int]
    operations: list[str]
    model: ModelSpec

    STAGE = "analyze"

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", tuple(Head.of(h) for h in self.heads))

    @property
    def labels(self) -> list[str]:
        return [str(h) for h in self.heads]

    def to_dataframe(self):
        """The last row of each pattern: one row per prompt x head x source token."""
        rows = []
        for k, pat in enumerate(self.patterns):
            for i, label in enumerate(self.labels):
                for pos, (tok, role) in enumerate(zip(self.tokens[k], self.roles[k])):
                    rows.append(
                        {
                            "pair_id": self.pair_ids[k],
                            "component": label,
                            "position": pos,
                            "token": tok,
                            "role": role,
                            "attention_from_last": float(pat[i, -1, pos]),
                        }
                    )
        return pd.DataFrame(rows)

    def summary_items(self) -> list[tuple[str, str]]:
        """Model, heads and prompts recorded."""
        return [("model", self.model.name), ("heads", ", ".join(self.labels)), ("prompts", str(len(self.prompts)))]


@torch.no_grad()
def head_patterns(
    model: HookedModel,
    pairs: PairSet,
    heads: KeyComponents | Sequence[tuple[int, int]],
    rows: Sequence[int] = (0,),
    drop_prefix: bool = False,
) -> HeadPatterns:
    """Record the attention patterns of ``heads`` on the rows ``rows`` of ``pairs``.

    ``drop_prefix=True`` cuts the few-shot prefix from both axes, which keeps the view readable for long
    prefixes. Each row's pattern is ``[head, query, key]``, square over the kept positions.
    """
    pairs.require_model(model, "head_patterns")
    spec = model.spec
    heads_t = resolve_heads(heads, spec)
    pairs.require(ROLE_COLUMNS + ("prompt",), "head_patterns")
    n = len(pairs)
    bad = [r for r in rows if not 0 <= r < n]
    if bad:
        raise FixableIndexError(
            f"rows {bad} are out of range for a pair set of {n} pairs. ", f"choose rows in 0..{n - 1}."
        )
    layers = sorted({l for l, _ in heads_t})
    out_tokens, out_roles, out_patterns = [], [], []
    for r in rows:
        toks = torch.tensor([pairs.tokens[r]], dtype=torch.long, device=model.device)
        _, cache = model.bridge.run_with_cache(
            toks, names_filter=lambda name: name in {hooks.pattern(l) for l in layers}
        )
        pat = torch.stack([cache[hooks.pattern(l)][0, h].to(model.device) for l, h in heads_t]).float()
        masks = role_masks(pairs.n_tokens[r], pairs.prefix_len[r], pairs.pos_a[r], pairs.pos_b[r], pairs.pos_op[r])
        role_of = [ROLES[int(masks[:, p].nonzero()[0])] for p in range(masks.shape[1])]
        strings = token_strings(model.tokenizer, pairs.tokens[r])
        start = pairs.prefix_len[r] if drop_prefix else 0
        out_patterns.append(pat[:, start:, start:].cpu().contiguous())  # the result
        out_tokens.append(strings[start:])
        out_roles.append(role_of[start:])
    return HeadPatterns(
        heads=heads_t,
        prompts=[pairs.prompts[r] for r in rows],
        tokens=out_tokens,
        roles=out_roles,
        patterns=out_patterns,
        pair_ids=[pairs.pair_ids[r] for r in rows],
        operations=[pairs.operations[r] for r in rows],
        model=spec,
    )
