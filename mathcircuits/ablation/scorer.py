"""Score one pair set under many knockouts, reusing every clean computation between them (exact).

Within a group of one template and length, the positions every prompt and counterfactual share run once
(a clean KV cache kept for every knockout); the clean residual entering each block is kept per batch, and
a knockout whose lowest ablated head is in layer ``k`` runs only blocks ``k…``
(:func:`~mathcircuits.models.run_from_layer`). With ``"mean"`` at every position the prefix itself
is ablated, so its one row reruns with the hooks. Each saving is tested equal to the plain forward
(``tests/test_fast_paths.py``). Accuracy is :func:`mathcircuits.data.score_pairs`' full-answer criterion.

Usage::

    scorer = KnockoutScorer(model, pairs, ablation="position_mean")
    scorer.accuracy([])            # the clean model
    scorer.accuracy([(1, 2)])      # with L1.H2 knocked out
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.ablation.hooks import Ablation, Scope, check_choice, set_ablation_hooks, z_ablation_hooks
from mathcircuits.ablation.means import HeadMeans, PoolKey, PositionPool, head_means
from mathcircuits.data.batching import length_groups
from mathcircuits.data.pairset import PairSet, Side
from mathcircuits.models import (
    Head,
    HookedModel,
    PrefixCaches,
    compare,
    fast_paths_enabled,
    hooks,
    model_depth,
    probe_pairs,
    repeat_cache,
    run_from_layer,
    shared_prefix_len,
    verify_once,
)

log = logging.getLogger(__name__)

__all__ = [
    "KnockoutScorer",
]

#: Knockout sets scored in one forward by default (``batch_sets``; 1: one forward per set, the reference).
BATCH_SETS = 16
#: The most rows (sets × pairs) one batched forward holds, and the most bytes of KV cache: the memory bounds.
MAX_ROWS = 512
MAX_CACHE_BYTES = 2 << 30


@runtime_checkable
class Tap(Protocol):
    """Reads more than the logits from a batched knockout forward (:meth:`KnockoutScorer.logits_many`'s ``tap``),
    so a second measurement of the same knocked-out runs needs no forward of its own.

    ``hooks`` gives the forward's extra hooks for batch ``rows`` (dataset rows) under ``n_sets`` sets, the rows
    set-major, the run starting at position ``offset`` and at block ``start`` (blocks below it are the clean
    run's); ``read`` is called after that forward with the sets' indices into ``logits_many``'s ``sets``.
    """

    def hooks(self, rows: list[int], n_sets: int, offset: int, start: int) -> list[tuple[str, Any]]: ...

    def read(self, rows: list[int], sets: list[int], start: int) -> None: ...


@dataclass(frozen=True)
class _Group:
    """Rows of one template and one scored length, with the positions every prompt and source share."""

    rows: list[int]
    shared: int  # positions 0…shared−1: the same tokens in every prompt and every source sequence of the group


class KnockoutScorer:
    """Scores one dataset under many knockouts, reusing every clean computation between them.

    A bridge without ``start_at_layer`` (TransformerLens 3.9's) runs every block instead of resuming at the
    lowest ablated layer: the same numbers, at more cost. ``source_column`` holds the prompts the means and
    donors come from. ``pool`` (``"position_mean"``): a :class:`~mathcircuits.ablation.PositionPool` that
    **leaves the scored pair's own counterfactual out** (``pairs`` then needs ``template_id`` and
    ``pair_id``); a row whose key has no other item falls back to its group's scored rows (listed in
    :attr:`pool_fallbacks`), as does None. ``reuse_clean`` keeps each batch's clean run to resume each
    knockout at its lowest ablated layer; worth it from the second scoring on.
    """

    _mid_ok = True  # set False on a bridge that cannot start mid-network

    def __init__(
        self,
        model: HookedModel,
        pairs: PairSet,
        ablation: Ablation = "mean",
        means: HeadMeans | None = None,
        scope: Scope = "all",
        seed: int = 0,
        batch_size: int = 32,
        source_column: Side = "cf_tokens",
        reuse_clean: bool = True,
        pool: PositionPool | None = None,
    ) -> None:
        check_choice(ablation, scope)
        self.reuse_clean = reuse_clean
        needed = ("tokens", "answer_tokens", "n_tokens") + (() if ablation == "mean" else (source_column,))
        pairs.require(needed, "KnockoutScorer")
        self.model, self.ablation, self.scope = model, ablation, scope
        if ablation == "mean":
            means = means if means is not None else head_means(model, pairs)
            means.check_model(model.spec)
        self.means = means
        answers = [list(a) for a in pairs.answer_tokens]
        self.answers = answers
        self.seqs = [list(t) + a[:-1] for t, a in zip(pairs.tokens, answers)]
        self.n_prompt = list(pairs.n_tokens)
        self.sources = None
        if ablation != "mean":
            self.sources = [list(t) + a[:-1] for t, a in zip(pairs.side(source_column), answers)]
            bad = [i for i, (s, q) in enumerate(zip(self.sources, self.seqs)) if len(s) != len(q)]
            if bad:
                raise FixableValueError(
                    f"pair {bad[0]} has a {source_column} of {len(self.sources[bad[0]]) - len(answers[bad[0]]) + 1} "
                    f"tokens but a prompt of {self.n_prompt[bad[0]]}, so positions do not align for "
                    f"ablation {ablation!r}. ",
                    "use pairs of equal token length, or ablation='mean'.",
                )
        keys = list(pairs.template_ids) if pairs.has("template_id") else None
        self.groups = []
        for rows in length_groups([len(s) for s in self.seqs], len(self.seqs), keys):
            seqs = [self.seqs[i] for i in rows] + ([self.sources[i] for i in rows] if self.sources else [])
            limit = min(self.n_prompt[i] for i in rows) - 1  # the first position whose logits are read
            self.groups.append(_Group(rows, shared_prefix_len(torch.tensor(seqs, device="cpu"), limit)))
        self.batches = [(g, grp.rows[j : j + batch_size]) for g, grp in enumerate(self.groups)
                        for j in range(0, len(grp.rows), batch_size)]  # fmt: skip
        rng = random.Random(seed)
        self.donor = list(range(len(self.seqs)))  # resample: row i takes its source from row donor[i]
        for grp in self.groups:
            for i, j in zip(grp.rows, rng.sample(grp.rows, len(grp.rows))):
                self.donor[i] = j
        self._prefix: PrefixCaches = {}  # clean KV caches of the shared prefixes
        self._clean: dict[int, tuple[Tensor, list[Tensor]]] = {}  # batch → (resid_pre stack, answer logits)
        self._src: dict[tuple[int, bool], Tensor] = {}  # (group, fast) → source z [rows, pos, layer, head, d_head]
        self._pool = pool if ablation == "position_mean" else None
        self._pooled_values: dict[tuple[int, tuple[int, ...], bool], Tensor] = {}
        self.pool_fallbacks: set[int] = set()  # rows whose key had no other pool item
        if self._pool is not None:
            pairs.require(("template_id", "pair_id"), "KnockoutScorer (pool)")
            self.pair_ids = list(pairs.pair_ids)
            self.keys: list[PoolKey] = [(str(t), n) for t, n in zip(pairs.template_ids, self.n_prompt)]

    # --- clean pieces, computed once ---------------------------------------------------------------------
    def _prefix_cache(self, prefix: list[int]) -> Any:
        key = tuple(prefix)
        if key not in self._prefix:
            runner = self.model.prefix_cached(store=self._prefix)
            runner.prefix_cache(torch.tensor(prefix, device=self.model.device))
        return self._prefix[key]

    def _cache(self, tokens: Tensor, p: int) -> Any:
        return repeat_cache(self._prefix_cache(tokens[0, :p].tolist()), tokens.shape[0]) if p > 0 else None

    def _run(self, tokens: Tensor, p: int, fwd_hooks: list[tuple[str, Any]], keep: int = 1) -> Tensor:
        """Hooked forward of ``tokens[:, p:]`` after the clean prefix; logits of the last ``keep`` positions only
        (a 262k-token unembedding costs more than the blocks).
        """
        kw = {"past_key_values": self._cache(tokens, p)} if p > 0 else {}
        return self.model.bridge.run_with_hooks(tokens[:, p:], fwd_hooks=fwd_hooks, logits_to_keep=keep, **kw)

    def _source_z(self, g: int, fast: bool) -> Tensor:
        """The source sequences' clean ``hook_z`` of every layer: from the shared position on (fast) or all."""
        if (g, fast) not in self._src:
            grp, spec = self.groups[g], self.model.spec
            p = grp.shared if fast else 0
            toks = torch.tensor([self.sources[i] for i in grp.rows], device=self.model.device)
            out = torch.zeros(len(grp.rows), toks.shape[1] - p, spec.n_layers, spec.n_heads, spec.d_head, device="cpu")
            for j in range(0, len(grp.rows), 32):

                def grab(act: Tensor, hook: Any, j: int = j) -> None:
                    out[j : j + act.shape[0], :, int(hook.name.split(".")[1])] = act.detach().float().cpu()

                names = [(hooks.z(layer), grab) for layer in range(spec.n_layers)]
                self._run(toks[j : j + 32], p, names)
            self._src[(g, fast)] = out
        return self._src[(g, fast)]

    def _values(self, g: int, rows: list[int], fast: bool) -> Tensor:
        """Replacement ``hook_z`` of a batch: ``[batch|1, pos|1, layer, head, d_head]``."""
        if self.ablation == "mean":
            return self.means.means[None, None]
        src = self._source_z(g, fast)
        if self.ablation == "position_mean":
            return self._pooled(g, rows, fast, src) if self._pool is not None else src.mean(0, keepdim=True)
        local = {i: n for n, i in enumerate(self.groups[g].rows)}
        return src[[local[self.donor[i]] for i in rows]]

    def _pooled(self, g: int, rows: list[int], fast: bool, src: Tensor) -> Tensor:
        """Per row: the pool's per-position mean of its key without its own counterfactual ``[rows, pos, ...]``."""
        ck = (g, tuple(rows), fast)
        if ck not in self._pooled_values:
            assert self._pool is not None and self.sources is not None
            start = self.groups[g].shared if fast else 0
            local = {i: n for n, i in enumerate(self.groups[g].rows)}
            group_mean = src.mean(0)
            out = []
            for i in rows:
                v = self._pool.value(self.keys[i], self.pair_ids[i], self.sources[i], src[local[i]], start)
                if v is None:
                    self.pool_fallbacks.add(i)
                    v = group_mean
                out.append(v)
            self._pooled_values[ck] = torch.stack(out)
        return self._pooled_values[ck]

    def replacement_z(self, group: int) -> Tensor:
        """A knocked-out head's ``hook_z`` on ``self.groups[group]``: ``[rows|1, pos|1, layer, head, d_head]``."""
        return self._values(group, self.groups[group].rows, fast=False)

    def _read(self, logits: Tensor, rows: list[int], offset: int) -> list[Tensor]:
        """Each row's logits at its answer positions ``[answer_len, vocab]``; ``logits`` start at ``offset``."""
        out = []
        for r, i in enumerate(rows):
            start = self.n_prompt[i] - 1 - offset
            out.append(logits[r, start : start + len(self.answers[i])].float().cpu())
        return out

    def _clean_batch(self, b: int) -> tuple[Tensor, list[Tensor]]:
        """The clean run of batch ``b`` from its shared position on: residual entering each block, and scores."""
        if b not in self._clean:
            g, rows = self.batches[b]
            p, spec = self.groups[g].shared, self.model.spec
            toks = torch.tensor([self.seqs[i] for i in rows], device=self.model.device)
            dtype = next(self.model.bridge.parameters()).dtype  # the model's own (a bf16 model reads bf16)
            # kept for every batch, so on the host; a resumed forward moves its block's slice back (_fast)
            shape = (spec.n_layers, len(rows), toks.shape[1] - p, spec.d_model)
            resid = torch.zeros(shape, dtype=dtype, device="cpu")

            def grab(act: Tensor, hook: Any) -> None:
                resid[int(hook.name.split(".")[1])] = act.detach()

            keep = toks.shape[1] - min(self.n_prompt[i] for i in rows) + 1
            logits = self._run(toks, p, [(hooks.resid_pre(layer), grab) for layer in range(spec.n_layers)], keep)
            self._clean[b] = (resid, self._read(logits, rows, toks.shape[1] - keep))
        return self._clean[b]

    # --- scoring -------------------------------------------------------------------------------------------
    @torch.no_grad()
    def logits(self, heads: Sequence[tuple[int, int]], fast: bool = True) -> list[Float[Tensor, "answer vocab"]]:
        """Each pair's logits at its answer positions with ``heads`` knocked out (teacher-forced, dataset order).

        ``fast`` reuses the clean prefix and the clean blocks below the lowest ablated layer (exact); ``False``
        runs one plain full forward per batch with the hooks at every position (the reference).
        """
        heads = [Head.of(h) for h in heads]
        for l, h in heads:
            self.model.spec.check_head(l, h)
        fast = fast and fast_paths_enabled()
        if fast:
            path = f"knockout ({self.ablation}, scope {self.scope})"
            verify_once(self.model.bridge, path, lambda: check_knockout(self.model, self.ablation, self.scope))
        out: list[Tensor] = [torch.empty(0, device="cpu")] * len(self.seqs)
        for b, (g, rows) in enumerate(self.batches):
            for i, row in zip(rows, self._fast(b, heads) if fast else self._plain(g, rows, heads)):
                out[i] = row
        return out

    @torch.no_grad()
    def logits_many(
        self,
        sets: Sequence[Sequence[tuple[int, int]]],
        batch_sets: int = BATCH_SETS,
        max_rows: int = MAX_ROWS,
        tap: Tap | None = None,
    ) -> list[list[Float[Tensor, "answer vocab"]]]:
        """:meth:`logits` of each head set in ``sets``, up to ``batch_sets`` sets in one forward.

        A forward holds the pairs of one batch once per set (sets × pairs rows, within :meth:`sets_per_forward`'s
        memory bound), resumed from the clean residual at the chunk's lowest ablated layer, each block of
        rows with its own set knocked out (:func:`~mathcircuits.ablation.hooks.set_ablation_hooks`). Sets are
        chunked by their lowest layer, so none resumes earlier than alone. ``batch_sets`` 1, fast paths off or a
        bridge that cannot resume: one :meth:`logits` per set (the reference). Equal to it to float rounding:
        a larger batch may round the matmuls differently (checked once per model, :func:`check_batched_knockout`).
        ``tap``: read along in every batched forward (:class:`Tap`; needs :meth:`can_batch` and non-empty sets).
        """
        sets = [[Head.of(h) for h in heads] for heads in sets]
        for heads in sets:
            for l, h in heads:
                self.model.spec.check_head(l, h)
        if tap is not None and (not self.can_batch(batch_sets) or not all(sets)):
            raise FixableValueError(
                "a tap reads batched knockout forwards only. ",
                "check can_batch(batch_sets) first and pass non-empty sets, or measure without the tap.",
            )
        if not self.can_batch(batch_sets):
            return [self.logits(heads) for heads in sets]
        path = f"batched knockout ({self.ablation}, scope {self.scope})"
        verify_once(self.model.bridge, path, lambda: check_batched_knockout(self.model, self.ablation, self.scope))
        blank = [torch.empty(0, device=self.model.device)] * len(self.seqs)  # placeholders, each replaced
        out: list[list[Tensor]] = [list(blank) if heads else self.logits([]) for heads in sets]
        by_layer: dict[int, list[int]] = {}
        for s, heads in enumerate(sets):
            if heads:
                by_layer.setdefault(min(l for l, _ in heads), []).append(s)
        try:
            for b, (_, rows) in enumerate(self.batches):
                per = self.sets_per_forward(rows, batch_sets, max_rows)
                for chosen in by_layer.values():
                    for j in range(0, len(chosen), per):
                        part = chosen[j : j + per]
                        for s, got in zip(part, self._fast_sets(b, [sets[s] for s in part], tap, part)):
                            for i, row in zip(rows, got):
                                out[s][i] = row
        except NotImplementedError:  # TransformerLens 3.9's bridge cannot start mid-network
            log.info("this bridge has no start_at_layer: one knockout set per forward")
            self._mid_ok = False
            return [self.logits(heads) for heads in sets]
        return out

    def can_batch(self, batch_sets: int = BATCH_SETS) -> bool:
        """Whether :meth:`logits_many` scores several sets per forward (else one :meth:`logits` per set)."""
        return batch_sets > 1 and fast_paths_enabled() and self._mid_ok

    def sets_per_forward(self, rows: list[int], batch_sets: int, max_rows: int = MAX_ROWS) -> int:
        """Sets one forward over ``rows`` holds: ``batch_sets``, within ``max_rows`` rows and ``MAX_CACHE_BYTES``
        of the repeated KV cache (keys and values of every layer and position), never fewer than one."""
        spec, seq = self.model.spec, max(len(self.seqs[i]) for i in rows)
        row_bytes = seq * spec.n_layers * 2 * spec.n_kv_heads * spec.d_head * self.model.dtype.itemsize
        return max(1, min(batch_sets, max_rows // len(rows), MAX_CACHE_BYTES // (row_bytes * len(rows))))

    def score_many(
        self, sets: Sequence[Sequence[tuple[int, int]]], batch_sets: int = BATCH_SETS, tap: Tap | None = None
    ) -> list[tuple[list[bool], list[bool]]]:
        """:meth:`score` of each head set in ``sets``, ``batch_sets`` sets to a forward (:meth:`logits_many`)."""
        return [self._correct(rows) for rows in self.logits_many(sets, batch_sets, tap=tap)]

    def _correct(self, logits: list[Tensor]) -> tuple[list[bool], list[bool]]:
        preds = [row.argmax(-1).tolist() for row in logits]
        correct = [p == a for p, a in zip(preds, self.answers)]
        return correct, [p[0] == a[0] for p, a in zip(preds, self.answers)]

    def score(self, heads: Sequence[tuple[int, int]], fast: bool = True) -> tuple[list[bool], list[bool]]:
        """Correctness of every pair with ``heads`` knocked out: ``(whole answer, first token)`` per pair."""
        return self._correct(self.logits(heads, fast))

    def accuracy(self, heads: Sequence[tuple[int, int]], first_token: bool = False) -> float:
        """Share of pairs answered correctly with ``heads`` knocked out (full answer, or its first token)."""
        correct, first = self.score(heads)
        chosen = first if first_token else correct
        return sum(chosen) / len(chosen)

    def _plain(self, g: int, rows: list[int], heads: list[Head]) -> list[Tensor]:
        toks = torch.tensor([self.seqs[i] for i in rows], device=self.model.device)
        fwd = z_ablation_hooks(self.model, heads, self._values(g, rows, fast=False), self.scope) if heads else []
        return self._read(self.model.bridge.run_with_hooks(toks, fwd_hooks=fwd), rows, 0)

    def _fast(self, b: int, heads: list[Head]) -> list[Tensor]:
        reuse = self.reuse_clean or b in self._clean
        if not heads and reuse:
            return self._clean_batch(b)[1]
        g, rows = self.batches[b]
        p = self.groups[g].shared
        toks = torch.tensor([self.seqs[i] for i in rows], device=self.model.device)
        values = self._values(g, rows, fast=True) if heads else None
        cache = None
        if p > 0 and heads and self.ablation == "mean" and self.scope == "all":  # the prefix is ablated: run its row
            _, one = self.model.bridge.run_with_hooks(
                toks[:1, :p],
                fwd_hooks=z_ablation_hooks(self.model, heads, values, "all"),
                return_type="logits_and_cache",
            )
            cache = repeat_cache(one, len(rows))
        elif p > 0:
            cache = self._cache(toks, p)
        keep = toks.shape[1] - min(self.n_prompt[i] for i in rows) + 1  # vocabulary logits only where read
        fwd = z_ablation_hooks(self.model, heads, values, self.scope) if heads else []
        if reuse and self._mid_ok:
            resid = self._clean_batch(b)[0]
            k = min(l for l, _ in heads)
            start = resid[k].to(self.model.layer_device(k))  # the host cache's slice, back where block k computes
            try:
                logits = run_from_layer(self.model.bridge, start, k, cache, fwd, logits_to_keep=keep)
                return self._read(logits, rows, toks.shape[1] - keep)
            except NotImplementedError:  # TransformerLens 3.9's bridge cannot start mid-network
                log.info("this bridge has no start_at_layer: knockout runs every block (exact, slower)")
                self._mid_ok = False
        # a single scoring, or a bridge that cannot resume mid-network: run every block of the suffix
        kw = {"past_key_values": cache} if cache is not None else {}
        logits = self.model.bridge.run_with_hooks(toks[:, p:], fwd_hooks=fwd, logits_to_keep=keep, **kw)
        return self._read(logits, rows, toks.shape[1] - keep)

    def _fast_sets(
        self, b: int, sets: list[list[Head]], tap: Tap | None = None, ids: list[int] | None = None
    ) -> list[list[Tensor]]:
        """Batch ``b`` under each of ``sets`` (non-empty) in one forward resumed mid-network: per set, its rows.
        ``tap`` reads along (``ids``: the sets' indices it is told)."""
        g, rows = self.batches[b]
        p, n = self.groups[g].shared, len(sets)
        toks = torch.tensor([self.seqs[i] for i in rows], device=self.model.device)
        values = self._values(g, rows, fast=True)
        cache = None
        if p > 0 and self.ablation == "mean" and self.scope == "all":  # the prefix is ablated: one row per set
            _, one = self.model.bridge.run_with_hooks(
                toks[:1, :p].expand(n, p),
                fwd_hooks=set_ablation_hooks(self.model, sets, values, "all"),
                return_type="logits_and_cache",
            )
            one.batch_repeat_interleave(len(rows))  # set-major: each set's prefix row for each of its pairs
            cache = one
        elif p > 0:
            cache = repeat_cache(self._prefix_cache(toks[0, :p].tolist()), n * len(rows))
        keep = toks.shape[1] - min(self.n_prompt[i] for i in rows) + 1
        k = min(l for heads in sets for l, _ in heads)
        start = self._clean_batch(b)[0][k].to(self.model.layer_device(k)).repeat(n, 1, 1)
        fwd = set_ablation_hooks(self.model, sets, values, self.scope)
        if tap is not None:
            fwd = fwd + tap.hooks(rows, n, p, k)
        logits = run_from_layer(self.model.bridge, start, k, cache, fwd, logits_to_keep=keep)
        if tap is not None:
            tap.read(rows, list(ids if ids is not None else range(n)), k)
        per = logits.reshape(n, len(rows), *logits.shape[1:])
        return [self._read(per[s], rows, toks.shape[1] - keep) for s in range(n)]


def check_batched_knockout(model: HookedModel, ablation: Ablation, scope: Scope) -> tuple[float, float]:
    """Batched knockout logits (many sets per forward) against one forward per set, on probe pairs.

    The run-time check of :meth:`KnockoutScorer.logits_many`: three sets of two lowest layers, batched two to a
    forward (a chunk of two and one of one), both ways. Returns ``(largest difference, tolerance)``.
    """
    spec = model.spec
    probe = probe_pairs(spec.vocab_size)
    scorer = KnockoutScorer(model, probe, ablation, scope=scope, batch_size=len(probe))
    mid, last = max(1, spec.n_layers // 2), spec.n_layers - 1
    sets = [[Head(mid, 0)], [Head(mid, spec.n_heads - 1), Head(last, 0)], [Head(last, spec.n_heads - 1)]]
    many = torch.cat([torch.cat(rows) for rows in scorer.logits_many(sets, batch_sets=2)])
    one = torch.cat([torch.cat(scorer.logits(s)) for s in sets])
    return compare(many, one, model.dtype, model_depth(model))


def check_knockout(model: HookedModel, ablation: Ablation, scope: Scope) -> tuple[float, float]:
    """Fast knockout logits (shared prefix, resumed mid-network) against plain forwards, on probe pairs.

    The run-time check of :meth:`KnockoutScorer.logits` (:func:`~mathcircuits.models.verify_once`): the clean
    model and two knockouts (a middle-layer head, then a middle and a last-layer head), both ways. Returns
    ``(largest difference, tolerance)``.
    """
    spec = model.spec
    probe = probe_pairs(spec.vocab_size)
    scorer = KnockoutScorer(model, probe, ablation, scope=scope, batch_size=len(probe))
    mid = max(1, spec.n_layers // 2)
    sets: list[list[Head]] = [[], [Head(mid, 0)], [Head(mid, 0), Head(spec.n_layers - 1, spec.n_heads - 1)]]
    fast = torch.cat([torch.cat(scorer.logits(s, fast=True)) for s in sets])
    plain = torch.cat([torch.cat(scorer.logits(s, fast=False)) for s in sets])
    return compare(fast, plain, model.dtype, model_depth(model))
