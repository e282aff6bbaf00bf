"""Position-aligned means over a pool of counterfactual prompts: the values of the ``position_mean`` ablation.

Wang et al. (2023, §4) ablate a head with its mean over the task's counterfactual distribution, per
position (IOI's ABC distribution). Here the pool is counterfactual prompts of the same template, each
followed by its pair's answer tokens (teacher forcing), averaged per template and prompt length so every
position means the same token role. The key holds nothing of the answer: keyed on answer
length, the prompt positions' mean would tell the ablated component whether the answer has two digits.
Prompt positions do not see the answer, so every prompt of the key enters their mean; an answer
position's mean is over the prompts whose answer reaches it. Only query positions are averaged (the
prefix is shared). Pool prompts with a scored pair's operands are left out (``exclude``).

Usage::

    pool = generate_pairs(tok, sets, GenerationConfig(operations=("add",), n_per_template=64, seed=1))
    means = pool_means(model, pool, exclude=scored_operands(eval_pairs))
    values = means.values(batch)       # AblationValues of one CircuitBatch
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.circuit.batches import CircuitBatch, circuit_batches
from mathcircuits.circuit.wiring import AblationValues, record_values
from mathcircuits.data import PairSet
from mathcircuits.models import HookedModel, PrefixCaches

__all__: list[str] = []


def scored_operands(pairs: PairSet) -> set[tuple[str, int, int]]:
    """``(template, a, b)`` of each pair, the pool prompts to leave out of the means."""
    return set(zip(pairs.template_ids, pairs.a, pairs.b))


@dataclass(frozen=True)
class PoolMeans:
    """Per (template, prompt length): mean ``hook_z`` and ``hook_mlp_out`` at the query positions, and how many
    pool prompts each position's mean holds (``counts``, fewer at answer positions that short answers miss).
    """

    means: dict[tuple[str, int], AblationValues]
    counts: dict[tuple[str, int], Tensor]

    def values(self, batch: CircuitBatch) -> AblationValues:
        """The means for one batch; a clear error when the pool has no prompt of its template and lengths."""
        key = (batch.templates[0], batch.n_prompt)
        n_pos = batch.cf_tokens.shape[1] - batch.prefix_len
        if key not in self.means or self.counts[key].shape[0] < n_pos:
            raise FixableValueError(
                f"the counterfactual pool has no prompt of template {key[0]!r} with {key[1]} prompt tokens and "
                f"{batch.answers.shape[1]} or more answer tokens (after leaving out the scored pairs' operands), so "
                "position_mean has nothing to average. ",
                "generate a larger pool (more n_per_template) of the evaluated templates.",
            )
        v = self.means[key]
        v = AblationValues(v.z[:, :n_pos], v.mlp[:, :n_pos], v.start)
        if v.start != batch.prefix_len:
            raise FixableValueError(
                f"the pool's prefix of template {key[0]!r} has {v.start} tokens but the scored pairs' "
                f"{batch.prefix_len}. ",
                "generate the pool with the same few-shot setting and template set.",
            )
        return v


@torch.no_grad()
def pool_means(
    model: HookedModel, pool: PairSet, exclude: Iterable[tuple[str, int, int]] = (), batch_size: int = 16
) -> PoolMeans:
    """Position-aligned means of every head's and MLP's output over a pool's counterfactual prompts.

    ``pool`` needs ``template_id``, ``a`` and ``b``; ``exclude``: ``(template, a, b)`` left out
    (:func:`scored_operands`).
    """
    skip = set(exclude)
    keys = zip(pool.template_ids, pool.a, pool.b)
    rows = [i for i, k in enumerate(keys) if k not in skip]
    if not rows:
        raise FixableValueError("every pool prompt was left out (they are the scored pairs). ", "pass a larger pool.")
    parts: dict[tuple[str, int], list[tuple[Tensor, Tensor, int]]] = {}
    starts: dict[tuple[str, int], int] = {}
    store: PrefixCaches = {}
    for b in circuit_batches(model, pool, "suffix", batch_size, rows=rows):
        key = (b.templates[0], b.n_prompt)
        if starts.setdefault(key, b.prefix_len) != b.prefix_len:  # one template shares one few-shot prefix
            raise FixableValueError(
                f"template {key[0]!r} has prompts with different prefixes. ", "regenerate the pool."
            )
        v = record_values(model, b.cf_tokens, b.prefix_len, store)
        parts.setdefault(key, []).append((v.z.double().sum(0), v.mlp.double().sum(0), len(b.idx)))
    means, counts = {}, {}
    for key, sums in parts.items():
        n_pos = max(z.shape[0] for z, _, _ in sums)
        z_total = torch.zeros(n_pos, *sums[0][0].shape[1:], dtype=torch.float64, device="cpu")
        m_total = torch.zeros(n_pos, *sums[0][1].shape[1:], dtype=torch.float64, device="cpu")
        count = torch.zeros(n_pos, dtype=torch.float64, device="cpu")
        for z, m, n in sums:  # a batch's positions run from the prefix's end to its own answer's end
            z_total[: z.shape[0]] += z
            m_total[: m.shape[0]] += m
            count[: z.shape[0]] += n
        means[key] = AblationValues(
            (z_total / count[:, None, None, None]).float()[None],
            (m_total / count[:, None, None]).float()[None],
            starts[key],
        )
        counts[key] = count
    return PoolMeans(means=means, counts=counts)
