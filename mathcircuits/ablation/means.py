"""Position-free head means: the replacement values of the ``mean`` ablation (Zhang et al. 2024, §3.3).

Each head's output ``hook_z`` (per query head, before ``W_O``) is averaged over
the counterfactual prompts of a dataset **and over all their token positions**,
giving one ``d_head`` vector per head. Being position-free, the same mean applies
to prompts of any length (other templates, word problems). The per-position and
resampling ablations take their values from aligned counterfactual prompts
instead (:class:`mathcircuits.ablation.KnockoutScorer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor, nn

from mathcircuits._io import SavedResult
from mathcircuits.data.batching import iter_batches
from mathcircuits.data.pairs import PairSet, check_columns
from mathcircuits.models import HookedModel, hooks
from mathcircuits.models.prefix import PrefixRunner, shared_prefix_len
from mathcircuits.models.spec import ModelSpec, as_spec, check_model

__all__ = ["HeadMeans", "PoolKey", "PositionPool", "head_means"]


@dataclass(frozen=True, repr=False)
class HeadMeans(SavedResult):
    """Mean ``hook_z`` per head over the counterfactual prompts: [layer, head, d_head].

    ``model`` is the spec of the model the means were taken on (``None`` only for
    means built by hand, which then cannot be checked against a model).
    """

    STAGE = "validate"

    means: Float[Tensor, "layer head d_head"]
    n_prompts: int
    source: str = "counterfactual prompts, all positions"
    model: ModelSpec | None = None

    def __post_init__(self) -> None:
        if not bool(torch.isfinite(self.means).all()):
            raise ValueError(
                "the head means hold NaN or infinity (e.g. taken over an empty dataset). "
                "Fix: compute them with head_means() on a non-empty dataset."
            )

    @classmethod
    def upgrade(cls, version: int, fields: dict[str, Any]) -> dict[str, Any]:
        """Version 1 did not record the model: such means load without identity (their shape is still checked)."""
        return {"model": None, **fields}

    def check_model(self, model: ModelSpec | HookedModel | nn.Module) -> None:
        """Refuse a model other than the one the means were taken on.

        Args:
            model: a hooked model or a ModelSpec.

        Returns:
            None; raises an error naming both models (or the shapes) and the fix.
        """
        spec = as_spec(model)
        if self.model is not None:
            check_model(self.model, spec, "these head means", "compute head_means() on this model")
        want = (spec.n_layers, spec.n_heads, spec.d_head)
        if tuple(self.means.shape) != want:
            raise ValueError(
                f"the head means have shape {tuple(self.means.shape)} but {spec.describe()} needs {want} "
                "[layer, head, d_head]. Fix: compute head_means() on this model."
            )

    def summary_items(self) -> list[tuple[str, str]]:
        """Model, prompts averaged over, and the means' shape [layer, head, d_head]."""
        return [
            ("model", self.model.name if self.model is not None else "?"),
            ("prompts", str(self.n_prompts)),
            ("means", f"tensor{list(self.means.shape)}"),
            ("source", self.source),
        ]


@torch.no_grad()
def head_means(model: HookedModel, dataset: PairSet, column: str = "cf_tokens", batch_size: int = 32) -> HeadMeans:
    """Mean of every head's ``hook_z`` over the prompts in ``column``, all positions.

    Args:
        model: the hooked model.
        dataset: pairs with a ``column`` of token lists.
        column: which prompts to average over (the counterfactual ones by default).
        batch_size: prompts per forward.

    Returns:
        :class:`HeadMeans` with one ``d_head`` vector per head.
    """
    spec = model.spec
    check_columns(dataset, (column,), "head_means")
    names = [hooks.z(layer) for layer in range(spec.n_layers)]
    total = torch.zeros(spec.n_layers, spec.n_heads, spec.d_head, dtype=torch.float64)
    count = 0
    seqs = dataset[column]
    cols = {"tokens": seqs, "template_id": dataset["template_id"]} if "template_id" in dataset.column_names else None
    for _, batch in iter_batches(cols or {"tokens": seqs}, batch_size, model.device, group_by="template_id"):
        toks = batch["tokens"]

        def make(layer: int, weight: int) -> Any:
            def hook(act: Tensor, hook: Any) -> None:  # the prefix run has one row standing for `weight` rows
                total[layer] += weight * act.double().sum(dim=(0, 1)).cpu()

            return hook

        # the shared prefix runs once (weighted by the batch size), then the suffixes
        suffix_hooks = [(n, make(layer, 1)) for layer, n in enumerate(names)]
        prefix_hooks = [(n, make(layer, toks.shape[0])) for layer, n in enumerate(names)]
        PrefixRunner(model.bridge, suffix_hooks, prefix_hooks).logits_from(toks, toks.shape[1] - 1)
        count += toks.numel()
    return HeadMeans(means=(total / count).float(), n_prompts=len(seqs), model=spec)


PoolKey = tuple[str, int, int]  # (template id, prompt tokens, answer tokens): sequences whose positions align


class PositionPool:
    """Per-position means of ``hook_z`` over a large pool of counterfactual sequences, leaving one item out.

    The ``position_mean`` ablation replaces a head's output at each position by its mean over counterfactual
    prompts whose positions align with the scored prompt's: the same template, prompt length and answer length
    (the sequence is the counterfactual prompt followed by its own teacher-forced answer, less the last token).
    Averaging over only the few scored pairs of a template makes the mean close to the scored pair's own
    counterfactual (a group of one *is* the identification patch), so the mean is taken over a large pool, by
    default every counterfactual prompt the data stage generated, and the scored pair's own counterfactual is left
    out (:meth:`value`). Positions every sequence of a key shares (the few-shot prefix) hold the same ``hook_z``
    in every sequence, so they are stored once.

    Args:
        model: the hooked model.
        pool: pairs with ``cf_tokens``, ``answer_tokens``, ``n_tokens``, ``template_id`` and ``pair_id``.
        keys: the keys to average (the scored rows' keys; others are skipped).
        shared: per key, how many leading positions every sequence of the key shares (at most; the pool's own
            shared prefix is used when shorter).
        keep: pair ids whose own ``hook_z`` is kept, so :meth:`value` can leave them out.
        batch_size: sequences per forward.
    """

    def __init__(
        self,
        model: HookedModel,
        pool: PairSet,
        keys: set[PoolKey],
        shared: dict[PoolKey, int],
        keep: set[int],
        batch_size: int = 32,
    ) -> None:
        check_columns(pool, ("cf_tokens", "answer_tokens", "n_tokens", "template_id", "pair_id"), "PositionPool")
        spec = model.spec
        by_key: dict[PoolKey, list[tuple[int, list[int]]]] = {}
        for tid, n, ans, cf, pid in zip(
            pool["template_id"], pool["n_tokens"], pool["answer_tokens"], pool["cf_tokens"], pool["pair_id"]
        ):
            k = (str(tid), int(n), len(ans))
            if k in keys and len(cf) == int(n):
                by_key.setdefault(k, []).append((int(pid), list(cf) + list(ans)[:-1]))
        self.head: dict[PoolKey, Tensor] = {}  # [q, layer, head, d_head]: the shared positions
        self.sums: dict[PoolKey, Tensor] = {}  # [pos − q, layer, head, d_head], float64
        self.counts: dict[PoolKey, int] = {}
        self.own: dict[tuple[PoolKey, int], Tensor] = {}
        names = [hooks.z(layer) for layer in range(spec.n_layers)]
        for k, items in by_key.items():
            toks_all = torch.tensor([s for _, s in items], device=model.device)
            q = min(shared.get(k, toks_all.shape[1] - 1), shared_prefix_len(toks_all, k[1] - 1))
            total = torch.zeros(toks_all.shape[1] - q, spec.n_layers, spec.n_heads, spec.d_head, dtype=torch.float64)
            for j in range(0, len(items), batch_size):
                toks = toks_all[j : j + batch_size]
                pre: dict[int, Tensor] = {}
                suf: dict[int, Tensor] = {}

                def grab(layer: int, store: dict[int, Tensor], first: bool) -> Any:
                    def fn(act: Tensor, hook: Any) -> None:
                        store[layer] = (act[0] if first else act).detach().float().cpu()

                    return fn

                runner = PrefixRunner(
                    model.bridge,
                    [(n, grab(layer, suf, False)) for layer, n in enumerate(names)],
                    [(n, grab(layer, pre, True)) for layer, n in enumerate(names)],
                )
                runner.logits_from(toks, toks.shape[1] - 1)
                s = torch.stack([suf[layer] for layer in range(spec.n_layers)], 2)  # [B, S − p, layer, head, d]
                p = toks.shape[1] - s.shape[1]
                if p > 0:
                    prefix = torch.stack([pre[layer] for layer in range(spec.n_layers)], 1)  # [p, layer, head, d]
                    s = torch.cat([prefix[None].expand(s.shape[0], -1, -1, -1, -1), s], 1)
                if k not in self.head:
                    self.head[k] = s[0, :q].clone()
                tail = s[:, q:]
                total += tail.double().sum(0)
                for r, (pid, _) in enumerate(items[j : j + batch_size]):
                    if pid in keep:
                        self.own[(k, pid)] = tail[r].clone()
            self.sums[k], self.counts[k] = total, len(items)

    def value(self, key: PoolKey, pair_id: int) -> Tensor | None:
        """The mean ``hook_z`` at every position ``[pos, layer, head, d_head]`` over the pool items of ``key``
        other than ``pair_id``; None when no other item has the key."""
        if key not in self.sums:
            return None
        own = self.own.get((key, pair_id))
        n = self.counts[key] - (own is not None)
        if n < 1:
            return None
        tail = (self.sums[key] - (own.double() if own is not None else 0)) / n
        return torch.cat([self.head[key], tail.float()], 0)
