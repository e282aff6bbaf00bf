"""One patching result over the pairs of several (e.g. one per operation), as one run over all of them gives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from mathcircuits._errors import FixableValueError

if TYPE_CHECKING:
    from mathcircuits.patching.result import PatchingResult

__all__: list[str] = []


def merge_results(
    cls: type[PatchingResult], parts: Sequence[PatchingResult], pair_ids: Sequence[int] | None = None
) -> PatchingResult:
    """:meth:`PatchingResult.merge <mathcircuits.patching.PatchingResult.merge>`, which documents it."""
    if not parts:
        raise FixableValueError("PatchingResult.merge got no results. ", "pass at least one PatchingResult.")
    first = parts[0]
    odd = [p for p in parts if (p.model, p.metric, p.method) != (first.model, first.metric, first.method)]
    if odd:
        raise FixableValueError(
            f"PatchingResult.merge got results of different models, metrics or methods "
            f"({first.model.name}/{first.metric}/{first.method} vs {odd[0].model.name}/{odd[0].metric}/"
            f"{odd[0].method}). ",
            "merge results of one model, metric and method.",
        )
    ids = list(pair_ids) if pair_ids is not None else [i for p in parts for i in p.pair_ids]
    ops = [op for p in parts for op in p.operations]
    common = dict(metric=first.metric, method=first.method, model=first.model, pair_ids=ids, operations=ops)
    common |= dict(clean_logit_mean=float("nan"), seconds=sum(p.seconds for p in parts), settings=first.settings)
    common |= dict(n_excluded=sum(p.n_excluded for p in parts))
    if all(len(p.pair_templates) == p.n_pairs for p in parts):
        common |= dict(pair_templates=[t for p in parts for t in p.pair_templates])
    if all(len(p.pair_operations) == p.n_pairs for p in parts):
        common |= dict(pair_operations=[o for p in parts for o in p.pair_operations])
    if all(len(p.pair_keys) == p.n_pairs for p in parts):
        common |= dict(pair_keys=[k for p in parts for k in p.pair_keys])
    if all(p.per_pair_total is not None for p in parts):
        common |= dict(per_pair_total=torch.cat([p.per_pair_total for p in parts]))
    if all(p.per_pair_heads is not None and p.per_pair_mlps is not None for p in parts):
        heads = torch.cat([p.per_pair_heads for p in parts])
        mlps = torch.cat([p.per_pair_mlps for p in parts])
        return cls(
            head_effects=heads.nanmean(0),
            mlp_effects=mlps.nanmean(0),
            n_pairs=heads.shape[0],
            per_pair_heads=heads,
            per_pair_mlps=mlps,
            **common,
        )
    weights = torch.tensor([float(p.n_pairs) for p in parts], device="cpu")
    w = weights / weights.sum()
    return cls(
        head_effects=(torch.stack([p.head_effects.float() for p in parts]) * w[:, None, None]).sum(0),
        mlp_effects=(torch.stack([p.mlp_effects.float() for p in parts]) * w[:, None]).sum(0),
        n_pairs=int(weights.sum()),
        **common,
    )
