"""Knockout: are the key heads necessary? (Zhang et al. 2024, §3.3)

A knocked-out head's output ``hook_z`` (per query head, before ``W_O``) is
replaced by a value that keeps the head's typical output but removes what it
computes about *this* prompt's arithmetic. Three replacements (``ablation``):

* ``"mean"`` — the head's mean over all counterfactual prompts of the dataset
  and over all their positions (:func:`~mathcircuits.ablation.head_means`), one
  vector per head at every position: the paper's mean ablation.
* ``"position_mean"`` — at each position, the head's mean over the counterfactual
  prompts of the same template and length (aligned positions; Wang et al. 2022,
  IOI). On the shared few-shot prefix every counterfactual prompt carries the
  same tokens as the prompt, so the mean there *is* the clean activation and the
  ablation changes only the query positions.
* ``"resample"`` — each prompt takes the head's output from one counterfactual
  prompt of the same template and length (a seeded random donor), at every
  position (resample ablation; Chan et al. 2022). Again a no-op on the prefix.

The counterfactual sequence of a pair is its ``cf_tokens`` followed by the same
teacher-forced answer tokens as the prompt, so positions stay aligned when the
answer has several tokens. ``scope="last"`` replaces only the last position.

Accuracy is the full-answer criterion of :func:`mathcircuits.data.score_pairs`
(every answer token greedy, teacher-forced); the first-token criterion is kept
beside it.

Exact savings (:class:`KnockoutScorer`, each tested equal to the plain forward in
``tests/test_fast_paths.py``): within a group of one template and length, the
positions every prompt and counterfactual share run once (a clean KV cache, kept
for every knockout point); the clean residual entering each block is kept per
batch, and a knockout whose lowest ablated head is in layer ``k`` runs only blocks
``k…`` (:func:`~mathcircuits.models.prefix.run_from_layer`). With ``"mean"`` at
every position the prefix itself is ablated, so its one row is run again with the
hooks for each knockout point.

The knockout curve removes heads in effect-rank order (most negative path-patching
effect first) and, for comparison, in random orders over all heads (several seeds;
mean and spread), as in the paper's Figure 3.
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence, get_args

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from mathcircuits._io import SavedResult
from mathcircuits.ablation.means import HeadMeans, _check_dataset, head_means
from mathcircuits.data.filter import length_groups
from mathcircuits.models import fast_paths_enabled, hooks
from mathcircuits.models.integrity import compare, model_dtype, probe_pairs, verify_once
from mathcircuits.models.prefix import PrefixRunner, repeat_cache, run_from_layer, shared_prefix_len
from mathcircuits.stats import wilson_interval

log = logging.getLogger(__name__)

__all__ = [
    "ABLATIONS",
    "Ablation",
    "HeadMeans",
    "KnockoutResult",
    "KnockoutScorer",
    "ablated_accuracy",
    "check_knockout",
    "ablated_model",
    "head_means",
    "knockout_curve",
]

Ablation = Literal["mean", "position_mean", "resample"]
ABLATIONS: tuple[str, ...] = get_args(Ablation)  # the choices, read off the Literal (one list)


def _check_choice(ablation: str, scope: str) -> None:
    if ablation not in ABLATIONS:
        raise ValueError(f"ablation {ablation!r} is unknown. Fix: use one of {list(ABLATIONS)}.")
    if scope not in ("all", "last"):
        raise ValueError(f"scope {scope!r} is unknown. Fix: use 'all' or 'last'.")


def _z_hooks(
    model: Any, heads: Sequence[tuple[int, int]], values: Tensor, scope: str, layer_index: dict[int, int] | None = None
) -> list[tuple[str, Any]]:
    """Hooks replacing ``hook_z`` of ``heads`` by ``values`` ``[batch|1, pos|1, layer, head, d_head]``.

    ``layer_index`` maps a model layer to its index in ``values``' layer axis (default: the same)."""
    by_layer: dict[int, list[int]] = defaultdict(list)
    for l, h in heads:
        model.spec.check_head(l, h)
        by_layer[l].append(h)
    out = []  # hook_z is per query head on every family, so this touches exactly the ablated heads
    for layer, hs in by_layer.items():
        idx = torch.tensor(hs)
        value = values[:, :, (layer_index or {}).get(layer, layer)][:, :, idx].to(model.device)

        def hook(act: Tensor, hook: Any, idx: Tensor = idx, value: Tensor = value) -> Tensor:
            act = act.clone()
            if scope == "last":
                act[:, -1, idx] = value[:, -1].to(act.dtype)
            else:
                act[:, :, idx] = value.expand(act.shape[0], act.shape[1], -1, -1).to(act.dtype)
            return act

        out.append((hooks.z(layer), hook))
    return out


def _hooks(model: Any, heads: Sequence[tuple[int, int]], means: HeadMeans, scope: str) -> list[tuple[str, Any]]:
    """Hooks of the position-free mean ablation of ``heads``."""
    return _z_hooks(model, heads, means.means[None, None], scope)


def ablated_model(model: Any, heads: Sequence[tuple[int, int]], means: HeadMeans, scope: str = "all") -> PrefixRunner:
    """A callable tokens → logits with ``heads`` mean-ablated (position-free mean; for :func:`score_pairs`).

    Args:
        model: the hooked model.
        heads: ``[(layer, head), ...]`` to ablate.
        means: the replacement values.
        scope: ``"all"`` positions or only the ``"last"``.

    Returns:
        A :class:`~mathcircuits.models.prefix.PrefixRunner`: the shared prefix runs once per batch, ablated
        like every other position (scope ``"all"``) or clean (scope ``"last"``).
    """
    _check_choice("mean", scope)
    hooks_ = _hooks(model, heads, means, scope)
    return PrefixRunner(model.bridge, fwd_hooks=hooks_, prefix_hooks=hooks_ if scope == "all" else None)


def _as_heads(model: Any, heads: Any) -> list[tuple[int, int]]:
    """Heads as ``[(layer, head)]``; a KeyComponents (anything with ``heads`` and ``check_model``) is checked."""
    if hasattr(heads, "heads") and hasattr(heads, "check_model"):
        heads.check_model(model.spec)
        heads = heads.heads
    return [(int(layer), int(head)) for layer, head in heads]


@dataclass(frozen=True)
class _Group:
    """Rows of one template and one scored length, with the positions every prompt and source share."""

    rows: list[int]
    shared: int  # positions 0…shared−1: the same tokens in every prompt and every source sequence of the group


class KnockoutScorer:
    """Scores one dataset under many knockouts, reusing every clean computation between them.

    A bridge without ``start_at_layer`` (TransformerLens 3.9's) runs every block instead of resuming at the
    lowest ablated layer: the same numbers, at more cost.

    Args:
        model: the hooked model.
        dataset: pairs with ``tokens``, ``answer_tokens``, ``n_tokens`` (and ``source_column`` unless
            ``ablation="mean"``); ``template_id`` groups them when present.
        ablation: ``"mean"``, ``"position_mean"`` or ``"resample"`` (see the module docstring).
        means: :class:`HeadMeans` of this model, for ``"mean"`` (default: taken on ``dataset``).
        scope: ``"all"`` positions or only the ``"last"``.
        seed: seed of the resampling donors.
        batch_size: pairs per forward.
        source_column: the prompts the per-position means and donors come from (the counterfactual ones).
        reuse_clean: keep the clean run of each batch (the residual entering every block) and resume each
            knockout at its lowest ablated layer; worth it from the second scoring on. ``False`` (one scoring)
            runs the ablated suffix through every block instead.
    """

    _mid_ok = True  # set False on a bridge that cannot start mid-network

    def __init__(
        self,
        model: Any,
        dataset: Any,
        ablation: str = "mean",
        means: HeadMeans | None = None,
        scope: str = "all",
        seed: int = 0,
        batch_size: int = 32,
        source_column: str = "cf_tokens",
        reuse_clean: bool = True,
    ) -> None:
        _check_choice(ablation, scope)
        self.reuse_clean = reuse_clean
        needed = ("tokens", "answer_tokens", "n_tokens") + (() if ablation == "mean" else (source_column,))
        _check_dataset(dataset, needed, "KnockoutScorer")
        self.model, self.ablation, self.scope = model, ablation, scope
        if ablation == "mean":
            means = means if means is not None else head_means(model, dataset)
            means.check_model(model.spec)
        self.means = means
        answers = [list(a) for a in dataset["answer_tokens"]]
        self.answers = answers
        self.seqs = [list(t) + a[:-1] for t, a in zip(dataset["tokens"], answers)]
        self.n_prompt = list(dataset["n_tokens"])
        self.sources = None
        if ablation != "mean":
            self.sources = [list(t) + a[:-1] for t, a in zip(dataset[source_column], answers)]
            bad = [i for i, (s, q) in enumerate(zip(self.sources, self.seqs)) if len(s) != len(q)]
            if bad:
                raise ValueError(
                    f"pair {bad[0]} has a {source_column} of {len(self.sources[bad[0]]) - len(answers[bad[0]]) + 1} "
                    f"tokens but a prompt of {self.n_prompt[bad[0]]}, so positions do not align for "
                    f"ablation {ablation!r}. Fix: use pairs of equal token length, or ablation='mean'."
                )
        keys = list(dataset["template_id"]) if "template_id" in dataset.column_names else None
        self.groups = []
        for rows in length_groups([len(s) for s in self.seqs], len(self.seqs), keys):
            seqs = [self.seqs[i] for i in rows] + ([self.sources[i] for i in rows] if self.sources else [])
            limit = min(self.n_prompt[i] for i in rows) - 1  # the first position whose logits are read
            self.groups.append(_Group(rows, shared_prefix_len(torch.tensor(seqs), limit)))
        self.batches = [(g, grp.rows[j : j + batch_size]) for g, grp in enumerate(self.groups)
                        for j in range(0, len(grp.rows), batch_size)]  # fmt: skip
        rng = random.Random(seed)
        self.donor = list(range(len(self.seqs)))  # resample: row i takes its source from row donor[i]
        for grp in self.groups:
            for i, j in zip(grp.rows, rng.sample(grp.rows, len(grp.rows))):
                self.donor[i] = j
        self._prefix: dict[tuple[int, ...], Any] = {}  # clean KV caches of the shared prefixes
        self._clean: dict[int, tuple[Tensor, list[Tensor]]] = {}  # batch → (resid_pre stack, answer logits)
        self._src: dict[tuple[int, bool], Tensor] = {}  # (group, fast) → source z [rows, pos, layer, head, d_head]

    # --- clean pieces, computed once ---------------------------------------------------------------------
    def _prefix_cache(self, prefix: list[int]) -> Any:
        key = tuple(prefix)
        if key not in self._prefix:
            runner = PrefixRunner(self.model.bridge, store=self._prefix)
            runner.prefix_cache(torch.tensor(prefix, device=self.model.device))
        return self._prefix[key]

    def _cache(self, tokens: Tensor, p: int) -> Any:
        return repeat_cache(self._prefix_cache(tokens[0, :p].tolist()), tokens.shape[0]) if p > 0 else None

    def _run(self, tokens: Tensor, p: int, fwd_hooks: list[tuple[str, Any]], keep: int = 1) -> Tensor:
        """Hooked forward of ``tokens[:, p:]`` after the clean prefix; vocabulary logits of the last ``keep``
        positions only (a 262k-token unembedding costs more than the blocks)."""
        kw = {"past_key_values": self._cache(tokens, p)} if p > 0 else {}
        return self.model.bridge.run_with_hooks(tokens[:, p:], fwd_hooks=fwd_hooks, logits_to_keep=keep, **kw)

    def _source_z(self, g: int, fast: bool) -> Tensor:
        """The source sequences' clean ``hook_z`` of every layer: from the shared position on (fast) or all."""
        if (g, fast) not in self._src:
            grp, spec = self.groups[g], self.model.spec
            p = grp.shared if fast else 0
            toks = torch.tensor([self.sources[i] for i in grp.rows], device=self.model.device)
            out = torch.zeros(len(grp.rows), toks.shape[1] - p, spec.n_layers, spec.n_heads, spec.d_head)
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
            return src.mean(0, keepdim=True)
        local = {i: n for n, i in enumerate(self.groups[g].rows)}
        return src[[local[self.donor[i]] for i in rows]]

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
            resid = torch.zeros(spec.n_layers, len(rows), toks.shape[1] - p, spec.d_model, dtype=dtype)

            def grab(act: Tensor, hook: Any) -> None:
                resid[int(hook.name.split(".")[1])] = act.detach()

            keep = toks.shape[1] - min(self.n_prompt[i] for i in rows) + 1
            logits = self._run(toks, p, [(hooks.resid_pre(layer), grab) for layer in range(spec.n_layers)], keep)
            self._clean[b] = (resid, self._read(logits, rows, toks.shape[1] - keep))
        return self._clean[b]

    # --- scoring -------------------------------------------------------------------------------------------
    @torch.no_grad()
    def logits(self, heads: Sequence[tuple[int, int]], fast: bool = True) -> list[Float[Tensor, "answer vocab"]]:
        """Each pair's logits at its answer positions with ``heads`` knocked out.

        Args:
            heads: ``[(layer, head), ...]`` to knock out (empty: the clean model).
            fast: reuse the clean prefix and the clean blocks below the lowest ablated layer (exact);
                ``False`` runs one plain full forward per batch with the hooks at every position (the reference).

        Returns:
            One ``[len(answer_tokens), vocab]`` tensor per pair, in dataset order (teacher-forced).
        """
        heads = [(int(l), int(h)) for l, h in heads]
        for l, h in heads:
            self.model.spec.check_head(l, h)
        fast = fast and fast_paths_enabled()
        if fast:
            path = f"knockout ({self.ablation}, scope {self.scope})"
            verify_once(self.model.bridge, path, lambda: check_knockout(self.model, self.ablation, self.scope))
        out: list[Tensor] = [torch.empty(0)] * len(self.seqs)
        for b, (g, rows) in enumerate(self.batches):
            for i, row in zip(rows, self._fast(b, heads) if fast else self._plain(g, rows, heads)):
                out[i] = row
        return out

    def score(self, heads: Sequence[tuple[int, int]], fast: bool = True) -> tuple[list[bool], list[bool]]:
        """Correctness of every pair with ``heads`` knocked out.

        Args:
            heads: ``[(layer, head), ...]`` to knock out (empty: the clean model).
            fast: as in :meth:`logits`.

        Returns:
            ``(correct, first_correct)``: per pair, every answer token greedy / the first one.
        """
        preds = [row.argmax(-1).tolist() for row in self.logits(heads, fast)]
        correct = [p == a for p, a in zip(preds, self.answers)]
        return correct, [p[0] == a[0] for p, a in zip(preds, self.answers)]

    def accuracy(self, heads: Sequence[tuple[int, int]], first_token: bool = False) -> float:
        """Share of pairs answered correctly with ``heads`` knocked out (full answer, or its first token)."""
        correct, first = self.score(heads)
        chosen = first if first_token else correct
        return sum(chosen) / len(chosen)

    def _plain(self, g: int, rows: list[int], heads: list[tuple[int, int]]) -> list[Tensor]:
        toks = torch.tensor([self.seqs[i] for i in rows], device=self.model.device)
        fwd = _z_hooks(self.model, heads, self._values(g, rows, fast=False), self.scope) if heads else []
        return self._read(self.model.bridge.run_with_hooks(toks, fwd_hooks=fwd), rows, 0)

    def _fast(self, b: int, heads: list[tuple[int, int]]) -> list[Tensor]:
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
                toks[:1, :p], fwd_hooks=_z_hooks(self.model, heads, values, "all"), return_type="logits_and_cache"
            )
            cache = repeat_cache(one, len(rows))
        elif p > 0:
            cache = self._cache(toks, p)
        keep = toks.shape[1] - min(self.n_prompt[i] for i in rows) + 1  # vocabulary logits only where read
        fwd = _z_hooks(self.model, heads, values, self.scope) if heads else []
        if reuse and self._mid_ok:
            resid = self._clean_batch(b)[0]
            k = min(l for l, _ in heads)
            try:
                logits = run_from_layer(self.model.bridge, resid[k], k, cache, fwd, logits_to_keep=keep)
                return self._read(logits, rows, toks.shape[1] - keep)
            except NotImplementedError:  # TransformerLens 3.9's bridge cannot start mid-network
                log.info("this bridge has no start_at_layer: knockout runs every block (exact, slower)")
                self._mid_ok = False
        # a single scoring, or a bridge that cannot resume mid-network: run every block of the suffix
        kw = {"past_key_values": cache} if cache is not None else {}
        logits = self.model.bridge.run_with_hooks(toks[:, p:], fwd_hooks=fwd, logits_to_keep=keep, **kw)
        return self._read(logits, rows, toks.shape[1] - keep)


def check_knockout(model: Any, ablation: str, scope: str) -> tuple[float, float]:
    """Fast knockout logits (shared prefix, resumed mid-network) against plain forwards, on probe pairs.

    The run-time check of :meth:`KnockoutScorer.logits` (:mod:`mathcircuits.models.integrity`): the clean model and
    two knockouts (a middle-layer head, then one middle and one last-layer head), both ways.

    Args:
        model: the hooked model.
        ablation: the ablation checked.
        scope: ``"all"`` or ``"last"``.

    Returns:
        ``(largest difference, tolerance)``.
    """
    spec = model.spec
    probe = probe_pairs(spec.vocab_size)
    scorer = KnockoutScorer(model, probe, ablation, scope=scope, batch_size=len(probe))
    mid = max(1, spec.n_layers // 2)
    sets: list[list[tuple[int, int]]] = [[], [(mid, 0)], [(mid, 0), (spec.n_layers - 1, spec.n_heads - 1)]]
    fast = torch.cat([torch.cat(scorer.logits(s, fast=True)) for s in sets])
    plain = torch.cat([torch.cat(scorer.logits(s, fast=False)) for s in sets])
    return compare(fast, plain, model_dtype(model))


def ablated_accuracy(
    model: Any,
    dataset: Any,
    heads: Any,
    means: HeadMeans | None = None,
    scope: str = "all",
    batch_size: int = 32,
    ablation: str = "mean",
    seed: int = 0,
) -> float:
    """Share of pairs answered correctly with ``heads`` knocked out.

    Args:
        model: the hooked model.
        dataset: pairs with ``tokens``, ``answer_tokens`` and ``n_tokens`` (non-empty; ``cf_tokens`` too
            unless ``ablation="mean"``).
        heads: a :class:`~mathcircuits.patching.KeyComponents` of this model, or ``[(layer, head), ...]``.
        means: :class:`HeadMeans` taken on this model (``"mean"`` only; default: taken on ``dataset``).
        scope: ``"all"`` positions or only the ``"last"``.
        batch_size: pairs per forward.
        ablation: ``"mean"``, ``"position_mean"`` or ``"resample"`` (module docstring).
        seed: seed of the resampling donors.

    Returns:
        The accuracy in [0, 1]. Heads or means of another model raise an error naming both models.
    """
    heads = _as_heads(model, heads)
    if means is not None:
        means.check_model(model.spec)
    _check_dataset(dataset, ("tokens", "answer_tokens", "n_tokens"), "ablated_accuracy")
    scorer = KnockoutScorer(model, dataset, ablation, means, scope, seed, batch_size, reuse_clean=False)
    return scorer.accuracy(heads)


@dataclass(frozen=True)
class KnockoutResult(SavedResult):
    """Accuracy as heads are knocked out: in effect-rank order and in random orders."""

    ks: list[int]
    ranked_accuracy: list[float]
    random_accuracy: Float[Tensor, "seed k"]
    baseline_accuracy: float
    operation: str
    ranked_heads: list[tuple[int, int]] = field(default_factory=list)
    n_pairs: int = 0
    scope: str = "all"
    seeds: list[int] = field(default_factory=list)
    ablation: str = "mean"

    STAGE = "validate"
    VERSION = 3

    @classmethod
    def upgrade(cls, version: int, fields: dict[str, Any]) -> dict[str, Any]:
        """Versions before 3 had one ablation, the position-free mean."""
        return {"ablation": "mean", **fields}

    def to_dataframe(self):
        """One row per k: ranked accuracy with its Wilson 95% interval over the ``n_pairs`` pairs
        (ranked_low, ranked_high), the random orders' mean, std and range (random_min, random_max), and drops."""

        rnd = self.random_accuracy
        wilson = [wilson_interval(round(a * self.n_pairs), self.n_pairs) for a in self.ranked_accuracy]
        return pd.DataFrame(
            {
                "k": self.ks,
                "ranked_accuracy": self.ranked_accuracy,
                "ranked_low": [w.low for w in wilson],
                "ranked_high": [w.high for w in wilson],
                "random_mean": rnd.mean(0).tolist(),
                "random_std": (rnd.std(0) if rnd.shape[0] > 1 else torch.zeros(rnd.shape[1])).tolist(),
                "random_min": rnd.min(0).values.tolist(),
                "random_max": rnd.max(0).values.tolist(),
                "ranked_drop": [a - self.baseline_accuracy for a in self.ranked_accuracy],
                "random_drop": [float(a) - self.baseline_accuracy for a in rnd.mean(0)],
            }
        )


def knockout_curve(
    model: Any,
    dataset: Any,
    patching: Any,
    max_k: int = 10,
    n_random: int = 3,
    seed: int = 0,
    means: HeadMeans | None = None,
    scope: str = "all",
    progress: bool = False,
    ablation: str = "mean",
    ks: Sequence[int] | None = None,
) -> KnockoutResult:
    """Knock out the top-k heads in effect-rank order and ``n_random`` random orders, for each k.

    Args:
        model: the hooked model.
        dataset: the pairs to score (non-empty, with ``tokens``, ``answer_tokens``, ``n_tokens``, ``cf_tokens``).
        patching: a :class:`~mathcircuits.patching.PatchingResult` of this model (finite head effects).
        max_k: knock out up to this many heads.
        n_random: number of random orders.
        seed: seed of the random orders (and of the resampling donors).
        means: :class:`HeadMeans` of this model for ``"mean"`` (default: taken on ``dataset``'s counterfactuals).
        scope: ``"all"`` positions or only the ``"last"``.
        progress: show a progress bar.
        ablation: ``"mean"``, ``"position_mean"`` or ``"resample"`` (module docstring).
        ks: the k values of the curve (default every k in 1…max_k; 0, the clean model, is always included).

    Returns:
        The :class:`KnockoutResult`.
    """

    spec = model.spec
    patching.check_model(spec)
    patching.check_finite()
    _check_choice(ablation, scope)
    _check_dataset(dataset, ("tokens", "answer_tokens", "n_tokens"), "knockout_curve")
    if ablation == "mean":
        means = means or head_means(model, dataset)
        means.check_model(spec)
    ranked = [(l, h) for l, h, _ in patching.top_heads(max_k)]
    wanted = range(1, len(ranked) + 1) if ks is None else ks
    bad = [k for k in wanted if not 1 <= int(k) <= len(ranked)]
    if bad:
        raise ValueError(f"ks {bad} are outside 1…{len(ranked)} (the ranked heads). Fix: choose k in that range.")
    ks = [0, *sorted({int(k) for k in wanted})]
    all_heads = [(l, h) for l in range(spec.n_layers) for h in range(spec.n_heads)]
    rng = random.Random(seed)
    orders = [rng.sample(all_heads, len(ranked)) for _ in range(n_random)]
    scorer = KnockoutScorer(model, dataset, ablation, means, scope, seed)
    bar = tqdm(total=len(ks) * (1 + n_random), disable=not progress, desc="knockout")
    base = scorer.accuracy([])
    ranked_acc = []
    for k in ks:
        ranked_acc.append(base if k == 0 else scorer.accuracy(ranked[:k]))
        bar.update()
    rand = torch.zeros(n_random, len(ks))
    for s, order in enumerate(orders):
        for j, k in enumerate(ks):
            rand[s, j] = base if k == 0 else scorer.accuracy(order[:k])
            bar.update()
    bar.close()
    ops = sorted(set(dataset["operation"])) if "operation" in dataset.column_names else ["?"]
    return KnockoutResult(
        ks=ks,
        ranked_accuracy=ranked_acc,
        random_accuracy=rand,
        baseline_accuracy=base,
        operation="+".join(ops),
        ranked_heads=ranked,
        n_pairs=len(dataset),
        scope=scope,
        seeds=[seed],
        ablation=ablation,
    )
