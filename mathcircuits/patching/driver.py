"""``path_patch``: one driver for the three path-patching methods (``"exact"``, ``"reference"``, ``"attribution"``).

Each is a :class:`~mathcircuits.patching.scan.ScanFn` in :data:`METHODS`; the driver batches, scans and
averages into a :class:`~mathcircuits.patching.result.PatchingResult`.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any

import torch

from mathcircuits._errors import FixableValueError
from mathcircuits._progress import progress_bar
from mathcircuits._schema import configured, expect, expect_pairs
from mathcircuits.data.pairset import PairSet, check_token_aligned, pair_batches, pair_keys
from mathcircuits.models import HookedModel, fast_paths_enabled, unloadable_parameters, verify_once
from mathcircuits.patching.attribution import attribution_scan
from mathcircuits.patching.checks import check_exact
from mathcircuits.patching.config import PatchingConfig
from mathcircuits.patching.exact import exact_scan
from mathcircuits.patching.metrics import Metric, MetricFn, MetricName, get_metric
from mathcircuits.patching.plan import plan_scan
from mathcircuits.patching.reference import reference_scan
from mathcircuits.patching.result import PatchingResult, PatchSettings
from mathcircuits.patching.scan import Method, ScanFn, Senders

__all__ = [
    "path_patch",
]

log = logging.getLogger(__name__)

METHODS: dict[Method, ScanFn] = {"exact": exact_scan, "reference": reference_scan, "attribution": attribution_scan}


def path_patch(
    model: HookedModel,
    pairs: PairSet,
    config: PatchingConfig | None = None,
    *,
    metric: MetricName | Metric | MetricFn | None = None,
    max_memory: int | str | None = None,
    chunk_rows: int = 8192,
    keep_per_pair: bool = False,
    progress: bool | None = None,
    **settings: Any,
) -> PatchingResult:
    """Path-patch every head and/or MLP to the logits at the last position (and every answer position).

    The result also holds each pair's *total effect* (counterfactual prompt vs clean), so a head's effect
    reads as a share of it (:meth:`PatchingResult.head_shares`). Pairs the metric refuses
    (``relative_logit``'s guard) are left out of every mean and counted in ``n_excluded``, with a warning.

    Args:
        config: the settings (a run's ``patching`` section); None: :class:`PatchingConfig`'s defaults. It reads
            ``method``, ``metric``, ``senders``, ``batch_size`` and ``max_memory``; each field's meaning is its
            help there.
        metric: replaces ``config.metric``: a name from :data:`~mathcircuits.patching.metrics.METRICS`, a
            :class:`Metric`, or a callable (:data:`~mathcircuits.patching.MetricFn`).
        max_memory: replaces ``config.max_memory`` (bytes or ``"8GB"``, beyond the weights):
            :func:`~mathcircuits.patching.plan.plan_scan` then picks the batch (≤ ``batch_size``) and
            ``chunk_rows``, recorded in the result's settings.
        chunk_rows: bounds the rows per MLP call.
        **settings: fields of :class:`PatchingConfig` that replace the config's (``method="reference"``),
            checked by it.
        progress: a bar on stderr (None: on unless ``MATHCIRCUITS_PROGRESS=0``; :mod:`mathcircuits._progress`).
    """
    expect("path_patch", "model", model, HookedModel, "a HookedModel", "pass mc.load_model(...)'s result")
    expect_pairs("path_patch", "pairs", pairs)
    pairs.require_model(model, "path_patch")
    cfg = configured("path_patch", PatchingConfig, config, **settings)
    metric = get_metric(cfg.metric if metric is None else metric)
    max_memory = (cfg.max_memory or None) if max_memory is None else max_memory
    senders, method, batch_size = cfg.senders, cfg.method, cfg.batch_size
    chosen = Senders.from_names(senders)
    scan = METHODS[method]
    empty = unloadable_parameters(model.hf_model)  # a split or offloaded model runs; one without weights cannot
    if empty:
        raise FixableValueError(
            f"this model has {len(empty)} parameters on the meta device that no offload hook loads (e.g. {empty[0]}), "
            "so its forwards would fail or read no weights. ",
            "load it with its weights, on one device or split "
            "with device_map (accelerate's offload to 'cpu'/'disk' is fine); docs/howto/big-models-on-gpu.md.",
        )
    check_token_aligned(pairs, model.spec.vocab_size)
    if method == "exact" and not fast_paths_enabled():
        log.info("fast paths are off: path patching runs the reference scan (one hooked forward per sender)")
        method, scan = "reference", METHODS["reference"]
    bar = progress_bar(progress, "checking the fast path" if method == "exact" else "batching the pairs")
    if method == "exact":  # the check of the scan this metric runs (the other is checked when first used)
        if metric.every_answer_token:
            verify_once(model.bridge, "exact path patching (answer tokens)", lambda: check_exact(model, answers=True))
        else:
            verify_once(model.bridge, "exact path patching", lambda: check_exact(model))
    spec = model.spec
    if max_memory is not None and method != "reference":  # the reference scan holds one forward at a time
        seq = max(len(t) for t in pairs.tokens) if len(pairs) else 1
        # teacher forcing reads every answer position: the longest answer's tokens per pair
        teacher = metric.every_answer_token and pairs.has("answer_tokens")
        positions = max((len(a) for a in pairs.answer_tokens), default=1) if teacher else 1
        plan = plan_scan(
            spec,
            model.dtype,
            max_memory,
            metric.needs_probs,
            batch_size,
            seq,
            chosen.heads,
            chosen.mlps,
            positions=positions,
        )
        log.info("memory plan: %s", plan)
        batch_size, chunk_rows = plan.batch_size, plan.chunk_rows
    t0 = time.perf_counter()
    n = len(pairs)
    all_heads = torch.full((n, spec.n_layers, spec.n_heads), float("nan"), device="cpu")
    all_mlps = torch.full((n, spec.n_layers), float("nan"), device="cpu")
    totals = torch.full((n,), float("nan"), device="cpu")
    excluded = torch.zeros(n, dtype=torch.bool, device="cpu")
    clean_sum = 0.0
    batches = pair_batches(pairs, batch_size, model.device, answers=metric.every_answer_token)
    what = [f"{spec.n_layers * spec.n_heads} heads"] * chosen.heads + [f"{spec.n_layers} MLPs"] * chosen.mlps
    bar.set_description(f"patching {' and '.join(what)} ({method}, {n} pairs)", refresh=False)
    bar.reset(total=len(batches))
    if method == "exact":  # the batches of one template (one per answer length) share its prefix's KV cache
        scan = functools.partial(exact_scan, prefixes={})
    for batch in batches:
        eff = scan(model, batch, chosen, metric, chunk_rows=chunk_rows, progress=not bar.disable)
        bar.update()
        all_heads[batch.idx] = eff.heads
        all_mlps[batch.idx] = eff.mlps
        clean_sum += float(eff.clean_logit.float().sum())
        if eff.total is not None:
            totals[batch.idx] = eff.total
        if eff.excluded is not None:
            excluded[batch.idx] = eff.excluded
    bar.close()
    n_excluded = int(excluded.sum())
    if n_excluded == n:
        raise FixableValueError(
            f"metric {metric.name!r} refused every one of the {n} pairs: each clean answer logit is at or below its "
            f"guard {metric.min_clean} (negative or near zero), where the ratio flips sign or explodes. ",
            "use metric='answer_logprob' (offset-free), or 'logit_diff'.",
        )
    if n_excluded:  # never silently: the count is in the result and the identify summary too
        log.warning(
            "metric %s excluded %d of %d pairs (clean value at or below its guard %s): their effects are left out "
            "of every mean",
            metric.name,
            n_excluded,
            n,
            metric.min_clean,
        )
        all_heads[excluded], all_mlps[excluded], totals[excluded] = float("nan"), float("nan"), float("nan")
    ops = sorted(set(pairs.operations)) if pairs.has("operation") else []
    pair_ids = list(pairs.pair_ids) if pairs.has("pair_id") else list(range(n))
    return PatchingResult(
        head_effects=all_heads.nanmean(0),
        mlp_effects=all_mlps.nanmean(0),
        metric=metric.name,
        method=method,
        model=spec,
        n_pairs=n,
        pair_ids=pair_ids,
        pair_keys=pair_keys(pairs),
        operations=ops,
        clean_logit_mean=clean_sum / n,
        per_pair_heads=all_heads if keep_per_pair else None,
        per_pair_mlps=all_mlps if keep_per_pair else None,
        seconds=time.perf_counter() - t0,
        settings=PatchSettings(senders=tuple(senders), batch_size=batch_size, chunk_rows=chunk_rows),
        per_pair_total=totals,
        n_excluded=n_excluded,
        pair_templates=[str(t) for t in pairs.template_ids] if pairs.has("template_id") else [],
        pair_operations=[str(o) for o in pairs.operations] if pairs.has("operation") else [],
    )
