"""Position-free head means: the replacement values of the ``mean`` ablation (Zhang et al. 2024, §3.3).

Each head's ``hook_z`` is averaged over a dataset's counterfactual prompts **and all their positions**,
so the same mean applies to prompts of any length (other templates, word problems).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor, nn

from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits.data.pairset import PairSet, Side
from mathcircuits.models import HookedModel, hooks, shared_prefix_len
from mathcircuits.models.spec import ModelSpec, as_spec, check_model

__all__ = [
    "HeadMeans",
    "PositionPool",
    "head_means",
]


@dataclass(frozen=True, repr=False)
class HeadMeans(SavedResult):
    """Mean ``hook_z`` per head over the counterfactual prompts: [layer, head, d_head].

    ``model`` is ``None`` only for means built by hand, which then cannot be checked against a model.
    """

    STAGE = "validate"

    means: Float[Tensor, "layer head d_head"]
    n_prompts: int
    source: str = "counterfactual prompts, all positions"
    model: ModelSpec | None = None

    def __post_init__(self) -> None:
        if not bool(torch.isfinite(self.means).all()):
            raise FixableValueError(
                "the head means hold NaN or infinity (e.g. taken over an empty dataset). ",
                "compute them with head_means() on a non-empty dataset.",
            )

    def check_model(self, model: ModelSpec | HookedModel | nn.Module) -> None:
        """Refuse a model other than the one the means were taken on (the error names both models, or the shapes)."""
        spec = as_spec(model)
        if self.model is not None:
            check_model(self.model, spec, "these head means", "compute head_means() on this model")
        want = (spec.n_layers, spec.n_heads, spec.d_head)
        if tuple(self.means.shape) != want:
            raise FixableValueError(
                f"the head means have shape {tuple(self.means.shape)} but {spec.describe()} needs {want} "
                "[layer, head, d_head]. ",
                "compute head_means() on this model.",
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
def head_means(model: HookedModel, pairs: PairSet, column: Side = "cf_tokens", batch_size: int = 32) -> HeadMeans:
    """Mean of every head's ``hook_z`` over the prompts in ``column`` (counterfactual by default), all positions."""
    pairs.require_model(model, "head_means")
    spec = model.spec
    pairs.require((column,), "head_means")
    names = [hooks.z(layer) for layer in range(spec.n_layers)]
    total = torch.zeros(spec.n_layers, spec.n_heads, spec.d_head, dtype=torch.float64, device="cpu")
    count = 0
    seqs = pairs.side(column)
    for _, toks in pairs.prompt_batches(batch_size, model.device, column):

        def make(layer: int, weight: int) -> Any:
            def hook(act: Tensor, hook: Any) -> None:  # the prefix run has one row standing for `weight` rows
                total[layer] += (weight * act.double().sum(dim=(0, 1))).cpu()

            return hook

        # the shared prefix runs once (weighted by the batch size), then the suffixes
        suffix_hooks = [(n, make(layer, 1)) for layer, n in enumerate(names)]
        prefix_hooks = [(n, make(layer, toks.shape[0])) for layer, n in enumerate(names)]
        model.prefix_cached(suffix_hooks, prefix_hooks).logits_from(toks, toks.shape[1] - 1)
        count += toks.numel()
    return HeadMeans(means=(total / count).float(), n_prompts=len(seqs), model=spec)


PoolKey = tuple[str, int]  # (template id, prompt tokens): sequences whose prompt positions align


class PositionPool:
    """Per-position means of ``hook_z`` over a large pool of counterfactual sequences, leaving one item out.

    The ``position_mean`` ablation replaces a head's output at each position by its mean over counterfactual
    sequences (prompt plus its own teacher-forced answer, less the last token) aligned with the scored one:
    same template and prompt length (:data:`PoolKey`). The key holds nothing of the answer: keyed on answer
    length, the prompt positions' mean would tell the ablated head whether the answer has two digits.
    Prompt positions do not see the answer, so every item of the key enters their mean; an answer
    position's mean is over the items whose answer reaches it. Over only a template's few scored pairs the
    mean is close to the pair's own counterfactual (a group of one *is* the identification patch), hence a
    large pool (by default every generated counterfactual) with the scored pair's own left out
    (:meth:`value`). The shared prefix is stored once; a key is computed on first use and kept.

    ``pool`` needs ``cf_tokens``, ``answer_tokens``, ``n_tokens``, ``template_id`` and ``pair_id``.
    """

    def __init__(self, model: HookedModel, pool: PairSet, batch_size: int = 32) -> None:
        pool.require(("cf_tokens", "answer_tokens", "n_tokens", "template_id", "pair_id"), "PositionPool")
        self.model, self.batch_size = model, batch_size
        self.items: dict[PoolKey, list[tuple[int, tuple[int, ...]]]] = {}
        for tid, n, ans, cf, pid in zip(
            pool.template_ids, pool.n_tokens, pool.answer_tokens, pool.cf_tokens, pool.pair_ids
        ):
            if len(cf) == int(n):
                k = (str(tid), int(n))
                self.items.setdefault(k, []).append((int(pid), tuple(cf) + tuple(ans)[:-1]))
        self._stats: dict[PoolKey, tuple[Tensor, Tensor, Tensor, dict[int, tuple[int, ...]]]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self.items.values())

    def _compute(self, k: PoolKey) -> tuple[Tensor, Tensor, Tensor, dict[int, tuple[int, ...]]]:
        """Head ``[q, layer, head, d_head]``, float64 tail sums, items per tail position, pair id → sequence."""
        if k not in self._stats:
            spec, items = self.model.spec, self.items[k]
            names = [hooks.z(layer) for layer in range(spec.n_layers)]
            prompts = torch.tensor([s[: k[1]] for _, s in items], device="cpu")
            q = shared_prefix_len(prompts, k[1] - 1)
            longest = max(len(s) for _, s in items)
            total = torch.zeros(
                longest - q, spec.n_layers, spec.n_heads, spec.d_head, dtype=torch.float64, device="cpu"
            )
            count = torch.zeros(longest - q, dtype=torch.float64, device="cpu")
            head = None
            by_len: dict[int, list[tuple[int, ...]]] = {}
            for _, s in items:
                by_len.setdefault(len(s), []).append(s)
            for length, seqs in sorted(by_len.items()):
                toks_all = torch.tensor(seqs, device=self.model.device)
                for j in range(0, len(seqs), self.batch_size):
                    z = self._z(toks_all[j : j + self.batch_size], names)
                    if head is None:
                        head = z[0, :q].clone()
                    total[: length - q] += z[:, q:].double().sum(0)
                    count[: length - q] += z.shape[0]
            self._stats[k] = (head, total, count, dict(items))
        return self._stats[k]

    def _z(self, toks: Tensor, names: list[str]) -> Tensor:
        """``hook_z`` of every layer ``[batch, pos, layer, head, d_head]`` (the shared prefix run once)."""
        pre: dict[int, Tensor] = {}
        suf: dict[int, Tensor] = {}

        def grab(layer: int, store: dict[int, Tensor], first: bool) -> Any:
            def fn(act: Tensor, hook: Any) -> None:
                store[layer] = (act[0] if first else act).detach().float().cpu()

            return fn

        runner = self.model.prefix_cached(
            [(n, grab(layer, suf, False)) for layer, n in enumerate(names)],
            [(n, grab(layer, pre, True)) for layer, n in enumerate(names)],
        )
        runner.logits_from(toks, toks.shape[1] - 1)
        z = torch.stack([suf[layer] for layer in range(len(names))], 2)  # [B, S − p, layer, head, d]
        p = toks.shape[1] - z.shape[1]
        if p > 0:
            prefix = torch.stack([pre[layer] for layer in range(len(names))], 1)  # [p, layer, head, d]
            z = torch.cat([prefix[None].expand(z.shape[0], -1, -1, -1, -1), z], 1)
        return z

    def value(
        self, key: PoolKey, pair_id: int, seq: Sequence[int], own: Tensor | None, start: int = 0
    ) -> Tensor | None:
        """The mean ``hook_z`` from position ``start`` to the end of ``seq`` ``[pos − start, layer, head, d_head]``
        over the pool items of ``key``, leaving out the item with ``pair_id`` when it is the same sequence ``seq``.

        ``own``: that item's ``hook_z`` from ``start`` on (needed when it is in the pool). None when a position
        of ``seq`` has no other item.
        """
        if key not in self.items:
            return None
        head, total, count, ids = self._compute(key)
        q, end = head.shape[0], len(seq) - head.shape[0]
        if end > total.shape[0]:
            return None  # no pool item reaches the sequence's last position
        inside = ids.get(pair_id) == tuple(seq)
        lo = max(0, start - q)
        tail, n = total[lo:end], count[lo:end] - float(inside)
        if bool((n < 1).any()):
            return None
        if inside:
            if own is None:
                raise ValueError("PositionPool.value needs the scored pair's own hook_z to leave it out.")
            tail = tail - own[max(0, q - start) :].double()
        tail = (tail / n[:, None, None, None]).float()
        return torch.cat([head[start:], tail], 0) if start < q else tail
