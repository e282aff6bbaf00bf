"""Position-aligned means over a pool of counterfactual prompts: the values of the ``position_mean`` ablation.

Wang et al. (2023, §4) ablate a head with its mean over the task's counterfactual distribution, taken
at each position separately (the ABC distribution of IOI). Here the pool is a set of counterfactual
prompts of the same template (other operands, or the operator replaced), each followed by its pair's
answer tokens as the scored sequences are (teacher forcing); the mean is taken per template, prompt
length and answer length, so every position means the same token role. The few-shot prefix is the
same in every prompt of a template, so only the query positions are averaged and used.

The scored pairs stay out of their own mean: pool prompts with a scored pair's operands (same
template) are left out (``exclude``).

Usage::

    pool = generate_pairs(tok, sets, GenerationConfig(operations=("add",), n_per_template=64, seed=1))
    means = pool_means(model, pool, exclude=scored_operands(eval_pairs))
    values = means.values(batch)       # AblationValues of one CircuitBatch
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from mathcircuits.circuit.batches import CircuitBatch, circuit_batches
from mathcircuits.circuit.wiring import AblationValues, record_values
from mathcircuits.models import HookedModel

__all__ = ["PoolMeans", "pool_means", "scored_operands"]


def scored_operands(dataset: Any) -> set[tuple[str, int, int]]:
    """``(template, a, b)`` of each pair, the pool prompts to leave out of the means."""
    return {(t, int(a), int(b)) for t, a, b in zip(dataset["template_id"], dataset["a"], dataset["b"])}


@dataclass(frozen=True)
class PoolMeans:
    """Per (template, prompt length, answer length): mean ``hook_z`` and ``hook_mlp_out`` at the query positions."""

    means: dict[tuple[str, int, int], AblationValues]
    counts: dict[tuple[str, int, int], int]

    def values(self, batch: CircuitBatch) -> AblationValues:
        """The means for one batch; a clear error when the pool has no prompt of its template and lengths."""
        key = (batch.templates[0], batch.n_prompt, batch.answers.shape[1])
        if key not in self.means:
            raise ValueError(
                f"the counterfactual pool has no prompt of template {key[0]!r} with {key[1]} prompt tokens and "
                f"{key[2]} answer tokens (after leaving out the scored pairs' operands), so position_mean has nothing "
                "to average. Fix: generate a larger pool (more n_per_template) of the evaluated templates."
            )
        v = self.means[key]
        if v.start != batch.prefix_len:
            raise ValueError(
                f"the pool's prefix of template {key[0]!r} has {v.start} tokens but the scored pairs' "
                f"{batch.prefix_len}. "
                "Fix: generate the pool with the same few-shot setting and template set."
            )
        return v


@torch.no_grad()
def pool_means(
    model: HookedModel, pool: Any, exclude: Iterable[tuple[str, int, int]] = (), batch_size: int = 16
) -> PoolMeans:
    """Position-aligned means of every head's and MLP's output over a pool's counterfactual prompts.

    Args:
        model: the hooked model.
        pool: pairs (``generate_pairs``) whose ``cf_tokens`` form the pool, with ``template_id``, ``a`` and ``b``.
        exclude: ``(template, a, b)`` left out of the pool (the scored pairs, :func:`scored_operands`).
        batch_size: prompts per forward.

    Returns:
        The :class:`PoolMeans`.
    """
    skip = set(exclude)
    keys = zip(pool["template_id"], pool["a"], pool["b"])
    rows = [i for i, k in enumerate(keys) if (k[0], int(k[1]), int(k[2])) not in skip]
    if not rows:
        raise ValueError("every pool prompt was left out (they are the scored pairs). Fix: pass a larger pool.")
    sums: dict[tuple[str, int, int], tuple[torch.Tensor, torch.Tensor, int, int]] = {}
    store: dict[tuple[int, ...], Any] = {}
    for b in circuit_batches(model, pool, "suffix", batch_size, rows=rows):
        key = (b.templates[0], b.n_prompt, b.answers.shape[1])
        v = record_values(model, b.cf_tokens, b.prefix_len, store)
        z, m = v.z.double().sum(0), v.mlp.double().sum(0)
        if key in sums:
            z0, m0, n0, start = sums[key]
            if start != b.prefix_len:  # pairs of one template share its few-shot prefix; batches differ only by rows
                raise ValueError(f"template {key[0]!r} has prompts with different prefixes. Fix: regenerate the pool.")
            sums[key] = (z0 + z, m0 + m, n0 + len(b.idx), start)
        else:
            sums[key] = (z, m, len(b.idx), b.prefix_len)
    means = {
        k: AblationValues((z / n).float()[None], (m / n).float()[None], start) for k, (z, m, n, start) in sums.items()
    }
    return PoolMeans(means=means, counts={k: v[2] for k, v in sums.items()})
