"""Run-time check of the exact scan against the reference scan, and of the null patch, on the user's model.

The exact scan (:mod:`.exact`) reads every sender's effect off two cached forwards and a
last-position chain through the later MLPs and norms, then reads the answer out of the
patched final residual itself (final norm → unembedding → soft cap). The reference scan
(:mod:`.reference`) runs one plain hooked forward per sender. Before the exact scan first
runs on a model, :func:`check_exact` compares them on probe pairs
(:func:`mathcircuits.models.integrity.probe_pairs`):

* the senders with the largest effects, a seeded random head and two MLPs: exact = reference;
* the null patch (counterfactual = clean prompt): the exact scan's readout of the unpatched
  residual (its clean value, read by the same function as every patched one) equals the bridge's
  clean logits, and a reference forward with every head
  frozen at its clean value reproduces them.

Both are measured in raw logits (``logit_diff`` added back to the clean logit), so the
tolerance scales with the logits and a constant readout offset shows up.
"""

from __future__ import annotations

import random

import torch

from mathcircuits.data.pairs import PairBatch, pair_batches
from mathcircuits.models import HookedModel
from mathcircuits.models.integrity import compare, model_dtype, probe_pairs
from mathcircuits.patching.exact import exact_scan
from mathcircuits.patching.metrics import METRICS
from mathcircuits.patching.reference import reference_scan
from mathcircuits.patching.scan import Senders

__all__ = ["check_exact"]


def check_exact(model: HookedModel) -> tuple[float, float]:
    """Exact against reference effects on a few senders, and the null patch, on probe pairs.

    Args:
        model: the hooked model.

    Returns:
        ``(largest difference, tolerance)`` in answer logits.
    """
    spec = model.spec
    batch = pair_batches(probe_pairs(spec.vocab_size), 8, model.device)[0]
    metric = METRICS["logit_diff"]
    exact = exact_scan(model, batch, Senders(), metric)
    strongest = exact.heads.abs().mean(0).flatten().argsort(descending=True)[:2].tolist()
    chosen = {("head", i // spec.n_heads, i % spec.n_heads) for i in strongest}
    rng = random.Random(0)
    chosen.add(("head", rng.randrange(spec.n_layers), rng.randrange(spec.n_heads)))
    chosen |= {("mlp", int(exact.mlps.abs().mean(0).argmax()), -1), ("mlp", spec.n_layers - 1, -1)}
    ref = reference_scan(model, batch, Senders(only=frozenset(chosen)), metric)
    fast, plain = [], []
    for kind, layer, head in sorted(chosen):
        a, b = (exact.heads[:, layer, head], ref.heads[:, layer, head]) if kind == "head" else (
            exact.mlps[:, layer], ref.mlps[:, layer])  # fmt: skip
        fast.append(a + exact.clean_logit)
        plain.append(b + ref.clean_logit)
    null = PairBatch(batch.idx, batch.tokens, batch.tokens, batch.answer)
    null_exact = exact_scan(model, null, Senders(), metric)
    null_ref = reference_scan(model, null, Senders(only=frozenset({("head", 0, 0)})), metric)
    clean = null_exact.clean_logit
    fast += [null_exact.heads[:, l, h] + clean for l in range(spec.n_layers) for h in range(spec.n_heads)]
    plain += [clean] * (spec.n_layers * spec.n_heads)
    fast.append(null_ref.heads[:, 0, 0] + null_ref.clean_logit)
    plain.append(null_ref.clean_logit)
    fast.append(null_exact.clean_logit)  # the scan's readout of the clean residual against the bridge's logits
    plain.append(null_ref.clean_logit)
    return compare(torch.stack(fast), torch.stack(plain), model_dtype(model))
