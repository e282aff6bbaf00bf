"""Run-time check of the exact scan against the reference scan, and of the null patch, on the user's model.

Before the exact scan first runs on a model, :func:`check_exact` compares it, on probe pairs, with the
reference scan for the largest-effect senders, a random head and two MLPs; and checks the null patch
(counterfactual = clean: the exact readout equals the clean logits, as does a forward with every head
frozen). Differences are in raw logits, so the tolerance scales with them and a readout offset shows.
``answers=True`` does the same teacher-forced, in the answer's log-probability, plus the total effect.

The sample: the exact scan runs on every head and the MLP of four layers (:func:`sample_layers`: the first,
the middle, the last and one drawn with a fixed seed), through the same per-layer code as a full scan, and the
senders compared are drawn from them. A full scan's rows cost an MLP chain and a vocabulary readout each; the
sample's rows are about a tenth of them, so the check stays a small share of a first path patching.
"""

from __future__ import annotations

import dataclasses
import random

import torch

from mathcircuits.data.pairs import PairBatch
from mathcircuits.data.pairset import pair_batches
from mathcircuits.models import HookedModel, compare, hooks, model_depth, probe_pairs
from mathcircuits.patching.cache import last_position_caches
from mathcircuits.patching.exact import chain_readout, exact_scan
from mathcircuits.patching.metrics import METRICS
from mathcircuits.patching.reference import reference_scan
from mathcircuits.patching.scan import BatchEffects, Senders

__all__: list[str] = []

PROBE_ROWS = 2
"""Probe pairs of the check: its cost is a scan of the sampled senders on them, so two keep it a small share of a
first path patching (each pair still has two answer tokens and its own counterfactual)."""


def sample_layers(n_layers: int) -> list[int]:
    """The check's layers: the first, the middle, the last and one drawn with a fixed seed (last in the list)."""
    fixed = sorted({0, n_layers // 2, n_layers - 1})
    rest = [layer for layer in range(n_layers) if layer not in fixed]
    return fixed + ([random.Random(0).choice(rest)] if rest else [])


def _rows(effects: BatchEffects, rows: slice) -> BatchEffects:
    """The effects of some of a batch's pairs."""
    values = {f.name: getattr(effects, f.name) for f in dataclasses.fields(effects)}
    return BatchEffects(**{k: None if v is None else v[rows] for k, v in values.items()})


def check_exact(model: HookedModel, answers: bool = False) -> tuple[float, float]:
    """Exact against reference effects on a few senders, and the null patch, on probe pairs.

    Returns ``(largest difference, tolerance)`` in answer logits (log-probabilities with ``answers``).
    """
    spec = model.spec
    batch = pair_batches(probe_pairs(spec.vocab_size, rows=PROBE_ROWS), 8, model.device, answers=answers)[0]
    metric = METRICS["answer_logprob" if answers else "logit_diff"]
    lp = last_position_caches(model, batch.tokens, batch.cf_tokens, answers=batch.answers if answers else None)
    layers = sample_layers(spec.n_layers)
    sample = frozenset(
        (kind, layer, h) for layer in layers for kind, h in [("mlp", -1)] + [("head", h) for h in range(spec.n_heads)]
    )
    exact = exact_scan(model, batch, Senders(only=sample), metric, cache=lp)
    heads = exact.heads.abs().mean(0).nan_to_num(-1.0).flatten()  # senders outside the sample are NaN
    strongest = heads.argsort(descending=True)[:2].tolist()
    chosen = {("head", i // spec.n_heads, i % spec.n_heads) for i in strongest}
    rng = random.Random(0)
    chosen.add(("head", layers[-1], rng.randrange(spec.n_heads)))  # the drawn layer
    mlps = exact.mlps.abs().mean(0).nan_to_num(-1.0)
    chosen |= {("mlp", int(mlps.argmax()), -1), ("mlp", spec.n_layers - 1, -1)}
    # one reference scan of the probe pairs and, stacked below them, the first pair's null patch (counterfactual =
    # clean), so the plain side is two forwards (a small batch costs about as much as one row); rows never interact
    P, first = batch.tokens.shape[0], slice(None, 1)
    stacked = PairBatch(
        batch.idx + batch.idx[first],
        torch.cat([batch.tokens, batch.tokens[first]]),
        torch.cat([batch.cf_tokens, batch.tokens[first]]),
        torch.cat([batch.answer, batch.answer[first]]),
        None if batch.answers is None else torch.cat([batch.answers, batch.answers[first]]),
    )
    both = reference_scan(model, stacked, Senders(only=frozenset(chosen)), metric)
    ref, null_ref = _rows(both, slice(None, P)), _rows(both, slice(P, None))
    if answers:  # effects are log-probability changes: add back each method's own clean log-probability
        final = lp.ref[hooks.resid_post(spec.n_layers - 1)]
        rows = torch.arange(final.shape[0], device=final.device)
        scan_clean = chain_readout(model, lp.structure, final, rows, batch, batch.answers, metric)
        clean_ex = scan_clean.value("logprob").float().cpu()  # the scan's readout of the clean residual
        clean_ref = lp.clean_answers(batch.answers).value("logprob").float().cpu()  # the bridge's logits
    else:
        clean_ex, clean_ref = exact.clean_logit, ref.clean_logit
    fast, plain = [], []
    for kind, layer, head in sorted(chosen):
        a, b = (exact.heads[:, layer, head], ref.heads[:, layer, head]) if kind == "head" else (
            exact.mlps[:, layer], ref.mlps[:, layer])  # fmt: skip
        fast.append(a + clean_ex)
        plain.append(b + clean_ref)
    if exact.total is not None and ref.total is not None:  # the counterfactual run: prefix cache vs plain forward
        fast.append(exact.total + clean_ex)
        plain.append(ref.total + clean_ref)
    # the null patch: the counterfactual run is the clean run itself (its cache), the chosen senders' rows; the
    # plain side's null rows (every other head frozen, the sender patched with its own clean value) too
    null = PairBatch(batch.idx, batch.tokens, batch.tokens, batch.answer, batch.answers)
    null_cache = dataclasses.replace(lp, cf={k: lp.ref[k] for k in lp.cf}, cf_logits=lp.logits)
    null_exact = exact_scan(model, null, Senders(only=frozenset(chosen)), metric, cache=null_cache)
    for effects, clean in ((null_exact, clean_ex if answers else null_exact.clean_logit),
                           (null_ref, clean_ref[first] if answers else null_ref.clean_logit)):  # fmt: skip
        fast += [effects.heads[:, l, h] + clean for kind, l, h in sorted(chosen) if kind == "head"]
        fast += [effects.mlps[:, l] + clean for kind, l, _ in sorted(chosen) if kind == "mlp"]
        plain += [clean] * len(chosen)
    # the scan's readout of the clean residual against the bridge's logits (a readout offset shows up here)
    fast.append(clean_ex if answers else null_exact.clean_logit)
    plain.append(clean_ref)
    # raw answer logits are rounded relative to the largest logit over the vocabulary (log-probabilities are
    # larger than it): the tolerance scales with that
    vocab_scale = 0.0 if answers else float(model.bridge(batch.tokens)[:, -1].abs().max())
    return compare(torch.cat(fast), torch.cat(plain), model.dtype, model_depth(model), vocab_scale)
