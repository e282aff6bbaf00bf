"""Do the later MLPs write the answer *because of* the key heads? Their answer margin with the heads knocked out.

The paper sees the answer rise in later MLP updates (§4.2); that does not show the MLPs *use* what the
heads moved. The causal test (claim C4): knock the key heads out and measure how much the later
MLPs' direct contribution to the answer falls.

Per pair, at the position that predicts the first answer token: MLP ``l``'s update ``u_l`` moves the
final logits by ``Δ_l = N_f(x_L) − N_f(x_L − u_l)`` (as in :mod:`mathcircuits.analysis.mlp_probes`); its
**answer margin** is ``Δ_l · (W_U[:, C] − mean_{c ≠ C} W_U[:, c])`` over the candidate numbers ``c`` (the
dataset's first answer tokens). The sum over ``layers`` is kept clean, with the key heads knocked out (the
knockout's ablation values), and with each of claim C2's random sets knocked out instead: the key drop
``clean − ablated`` is placed among the random sets' drops (C4's null).

Usage::

    res = mlp_margin(model, fresh_pairs, key.heads, layers=range(14, 30), ablation="position_mean")
    res.drop()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits.ablation.hooks import Ablation, Scope, set_ablation_hooks, z_ablation_hooks
from mathcircuits.ablation.means import HeadMeans
from mathcircuits.ablation.scorer import BATCH_SETS, KnockoutScorer
from mathcircuits.data.pairset import PairSet
from mathcircuits.models import HookedModel, fast_paths_enabled, final_norm, hooks
from mathcircuits.models.families import block_structure
from mathcircuits.models.heads import Head
from mathcircuits.stats.sequential import SequentialTest, besag_clifford

__all__ = ["MLPMargin", "mlp_margin"]


@dataclass(frozen=True, repr=False)
class MLPMargin(SavedResult):
    """The later MLPs' direct answer margin per pair, clean and with the key heads knocked out (logits)."""

    key_heads: list[Head]
    layers: list[int]
    clean_margin: Float[Tensor, " pair"]
    ablated_margin: Float[Tensor, " pair"]
    operations: list[str]
    template_ids: list[str]
    pair_ids: list[int]
    ablation: Ablation = "position_mean"
    scope: Scope = "all"
    random_heads: list[list[Head]] = field(default_factory=list)
    random_ablated: Float[Tensor, "draw pair"] | None = None
    planned_draws: int = -1  # random sets planned; more than len(random_heads) when the sequential test stopped
    stop_after: int = 0  # the sequential test's h (0: the fixed-n test)

    STAGE = "validate"
    VERSION = 3

    def __post_init__(self) -> None:
        n = len(self.pair_ids)
        if tuple(self.clean_margin.shape) != (n,) or tuple(self.ablated_margin.shape) != (n,):
            raise ValueError(
                f"MLPMargin has margins of shapes {tuple(self.clean_margin.shape)} and "
                f"{tuple(self.ablated_margin.shape)} for {n} pairs."
            )
        shape = None if self.random_ablated is None else tuple(self.random_ablated.shape)
        if (shape or (0, n)) != (len(self.random_heads), n):
            raise FixableValueError(
                f"MLPMargin has {len(self.random_heads)} random head sets but random margins of shape {shape} for "
                f"{n} pairs. ",
                "pass one row of margins per random set (or neither).",
            )

    @property
    def random_drops(self) -> Float[Tensor, "draw pair"]:
        """Per random set and pair: clean margin − margin with that set knocked out ([0, pair] when none)."""
        if self.random_ablated is None:
            return torch.zeros(0, len(self.pair_ids), device=self.clean_margin.device)
        return self.clean_margin[None] - self.random_ablated

    @property
    def drops(self) -> Float[Tensor, " pair"]:
        """Per pair: clean margin − ablated margin (positive: the MLPs write less of the answer)."""
        return self.clean_margin - self.ablated_margin

    def drop(self) -> float:
        """Mean drop over the pairs."""
        return float(self.drops.mean())

    @property
    def sequential(self) -> SequentialTest:
        """The key drop among the random sets' mean drops as a sequential Monte Carlo test (Besag–Clifford)."""
        exceeds = (self.random_drops.mean(1) >= self.drop() - 1e-12).tolist()
        return besag_clifford(exceeds, max(self.planned_draws, len(self.random_heads), 1), self.stop_after)

    def summary_items(self) -> list[tuple[str, str]]:
        """Layers, pairs, and the mean margin clean → ablated."""
        return [
            ("MLP layers", f"L{min(self.layers)}–L{max(self.layers)}" if self.layers else "none"),
            ("pairs", str(len(self.pair_ids))),
            (
                "answer margin",
                f"{float(self.clean_margin.mean()):.2f} → {float(self.ablated_margin.mean()):.2f} logits "
                f"with {len(self.key_heads)} key heads knocked out",
            ),
        ]


@torch.no_grad()
def mlp_margin(
    model: HookedModel,
    pairs: PairSet,
    key_heads: Sequence[tuple[int, int]],
    layers: Sequence[int],
    ablation: Ablation = "position_mean",
    means: HeadMeans | None = None,
    scope: Scope = "all",
    seed: int = 0,
    batch_size: int = 32,
    scorer: KnockoutScorer | None = None,
    fast: bool = True,
    random_sets: Sequence[Sequence[tuple[int, int]]] = (),
    batch_sets: int = BATCH_SETS,
) -> MLPMargin:
    """The summed direct answer margin of the MLPs in ``layers``, clean and with ``key_heads`` knocked out.

    ``scorer``: one built on ``pairs`` with the same ablation (reuses its replacement values). ``fast``:
    run the positions a template's prompts share once, clean (exact; ``False``: every position, the
    reference). ``random_sets``: knocked out instead of the key heads, one at a time (C4's null:
    :attr:`RandomControl.draws`). ``batch_sets``: variants (clean, key, random sets) run in one forward, each
    on its own copy of a batch's pairs (within :meth:`KnockoutScorer.sets_per_forward`'s memory bound; 1: one
    forward per variant, the reference; equal to it to float rounding).
    """
    pairs.require_model(model, "mlp_margin")
    spec = model.spec
    layers = check_layers(layers, spec.n_layers)
    pairs.require(("tokens", "answer_tokens", "n_tokens"), "mlp_margin")
    heads = [Head.of(h) for h in key_heads]
    scorer = scorer or KnockoutScorer(model, pairs, ablation, means, scope, seed, batch_size, reuse_clean=False)
    variants = [[], heads, *[[Head.of(h) for h in r] for r in random_sets]]  # clean, key, random sets
    out = _variant_margins(MarginReader(model, scorer, layers), variants, batch_size, fast, batch_sets).margins
    return MLPMargin(
        key_heads=heads,
        layers=layers,
        clean_margin=out[0],
        ablated_margin=out[1],
        **pairs.labels(),
        ablation=ablation,
        scope=scope,
        random_heads=variants[2:],
        random_ablated=out[2:] if len(variants) > 2 else None,
    )


def check_layers(layers: Sequence[int], n_layers: int) -> list[int]:
    """``layers`` sorted and distinct; an error unless they are a non-empty subset of the model's layers."""
    chosen = sorted({int(l) for l in layers})
    if not chosen or not all(0 <= l < n_layers for l in chosen):
        raise FixableValueError(
            f"layers {chosen} must be a non-empty subset of 0..{n_layers - 1}. ", "pass MLP layers."
        )
    return chosen


class MarginReader:
    """The summed answer margin of ``layers``' MLP updates at each pair's last prompt position, from grabbed
    activations: ``Δ_l = N_f(x_L) − N_f(x_L − u_l)`` against the answer's unembedding minus the other candidates'."""

    def __init__(self, model: HookedModel, scorer: KnockoutScorer, layers: list[int]) -> None:
        self.model, self.scorer, self.layers = model, scorer, layers
        self.structure = block_structure(model)
        self.W_U = model.bridge.W_U.float()
        self.answer = [int(a[0]) for a in scorer.answers]
        self.cand = torch.tensor(sorted(set(self.answer)), device=self.W_U.device)

    def positions(self, rows: list[int], offset: int, n_sets: int) -> Tensor:
        """Set-major rows: each row's last prompt position, counted from ``offset``."""
        pos = torch.tensor([self.scorer.n_prompt[i] - 1 - offset for i in rows], device=self.W_U.device)
        return pos.repeat(n_sets)

    def hooks(self, store: dict[int, Tensor], at: Tensor, layers: Sequence[int]) -> list[tuple[str, Any]]:
        """Grab ``layers``' MLP outputs and the last residual at ``at`` into ``store`` (keyed by layer; −1: last)."""

        # keyed by what we asked for: the bridge reports aliases under their canonical names
        def grab(key: int) -> Any:
            def fn(act: Tensor, hook: Any) -> None:
                idx = torch.arange(act.shape[0], device=act.device), at.to(act.device)
                store[key] = act[idx].detach().float().to(self.W_U.device)  # where the margin is computed

            return fn

        last = hooks.resid_post(self.model.spec.n_layers - 1)
        return [(hooks.mlp_out(l), grab(l)) for l in layers] + [(last, grab(-1))]

    def direction(self, rows: list[int], n_sets: int) -> Tensor:
        """Set-major rows: the answer's unembedding minus the mean of the other candidates' ``[n_sets·rows, d]``."""
        W_U, cand = self.W_U, self.cand
        ans = torch.tensor([self.answer[i] for i in rows], device=W_U.device).repeat(n_sets)
        others = (cand[None, :] != ans[:, None]).float()  # [rows, C]
        return W_U[:, ans].T - (others @ W_U[:, cand].T) / others.sum(-1, keepdim=True).clamp(min=1)

    def margins(self, final: Tensor, upd: Tensor, rows: list[int], n_sets: int) -> Tensor:
        """``[n_sets, rows]`` margins from the last residual ``[n_sets·rows, d]`` and the updates
        ``[n_sets·rows, L, d]``."""
        structure, model = self.structure, self.model
        delta = final_norm(model, structure, final[:, None, :]) - final_norm(model, structure, final[:, None, :] - upd)
        margin = (delta * self.direction(rows, n_sets)[:, None, :]).sum(-1).sum(-1)  # summed over the layers
        return margin.reshape(n_sets, len(rows)).cpu()

    def answer_margin(self, final: Tensor, rows: list[int], n_sets: int) -> Tensor:
        """``[n_sets, rows]``: the answer margin of the final logits (no unembedding bias) from the last residual
        ``[n_sets·rows, d]``: the answer's logit over the other candidates' mean."""
        x = final_norm(self.model, self.structure, final[:, None, :])[:, 0]
        return (x * self.direction(rows, n_sets)).sum(-1).reshape(n_sets, len(rows)).cpu()


@dataclass(frozen=True)
class _VariantRuns:
    """What one forward per variant and batch read: the MLP margins and the final answer margins ``[variant, pair]``;
    of a clean ``variants[0]``, the updates at the last prompt position ``[pair, L, d]`` (else empty) and, when
    asked, every position's MLP outputs per pair (``row → [L, pos, d]``, from its batch's first run position on)."""

    margins: Float[Tensor, "variant pair"]
    answer: Float[Tensor, "variant pair"]
    clean_updates: Float[Tensor, "pair layer d_model"]
    clean_mlp: dict[int, Tensor]


@torch.no_grad()
def _variant_margins(
    reader: MarginReader,
    variants: list[list[Head]],
    batch_size: int,
    fast: bool,
    batch_sets: int,
    keep_clean_mlp: bool = False,
) -> _VariantRuns:
    """Every variant's margins per pair, one forward per variant and batch (``batch_sets`` variants to a forward)."""
    model, scorer, layers = reader.model, reader.scorer, reader.layers
    n = len(scorer.seqs)
    out = torch.zeros(len(variants), n, device="cpu")
    answer = torch.zeros(len(variants), n, device="cpu")
    is_clean = bool(variants) and not variants[0]
    clean_upd = torch.zeros(n if is_clean else 0, len(layers), model.spec.d_model, device="cpu")
    clean_mlp: dict[int, Tensor] = {}
    # the shared prefix runs once, clean (not with the position-free mean at every position: that ablates it too)
    fast = fast and fast_paths_enabled() and not (scorer.ablation == "mean" and scorer.scope == "all")
    for g, grp in enumerate(scorer.groups):
        p = grp.shared if fast else 0
        rows = grp.rows
        for j in range(0, len(rows), batch_size):
            part = rows[j : j + batch_size]
            toks = torch.tensor([scorer.seqs[i] for i in part], device=model.device)
            vals = scorer._values(g, part, fast=p > 0)
            per = scorer.sets_per_forward(part, batch_sets)
            for v in range(0, len(variants), per):
                chunk = variants[v : v + per]
                n_chunk = len(chunk)
                store: dict[int, Tensor] = {}
                if n_chunk == 1:  # one forward per variant: the reference
                    fwd = z_ablation_hooks(model, chunk[0], vals, scorer.scope) if chunk[0] else []
                else:
                    fwd = set_ablation_hooks(model, chunk, vals, scorer.scope)
                fwd = fwd + reader.hooks(store, reader.positions(part, p, n_chunk), layers)
                whole: dict[int, Tensor] = {}
                if keep_clean_mlp and v == 0 and is_clean:
                    fwd = fwd + [(hooks.mlp_out(l), _keep_rows(whole, l, len(part))) for l in layers]
                scorer._run(toks.repeat(n_chunk, 1), p, fwd)
                upd = torch.stack([store[l] for l in layers], 1)  # [rows, L, d]
                if v == 0 and clean_upd.shape[0]:
                    clean_upd[part] = upd[: len(part)].cpu()
                if whole:  # kept for every batch, so on the host
                    clean_mlp.update(zip(part, torch.stack([whole[l] for l in layers], 1)))
                out[v : v + n_chunk, part] = reader.margins(store[-1], upd, part, n_chunk)
                answer[v : v + n_chunk, part] = reader.answer_margin(store[-1], part, n_chunk)
    return _VariantRuns(out, answer, clean_upd, clean_mlp)


def _keep_rows(into: dict[int, Tensor], layer: int, n: int) -> Any:
    """A hook keeping the first ``n`` rows of an activation (the clean block of a set-major batch) on the host."""

    def fn(act: Tensor, hook: Any) -> None:
        into[layer] = act[:n].detach().cpu()

    return fn


class MarginTap:
    """C4's margins read along C2's batched knockout forwards (a :class:`~mathcircuits.ablation.scorer.Tap`).

    A forward resumed at block ``k`` runs no MLP below ``k``; those updates are the clean run's (the knockout
    cannot change them), so the margin is that of one forward per set, to float rounding. ``margins[s, i]``:
    random set ``s``, pair ``i``: set ``s`` is ``sets[s − first]`` of the :meth:`KnockoutScorer.score_many` call
    it rides on (:meth:`starting_at` sets ``first``); :meth:`measured`: every pair of set ``s`` was read.
    ``answer[s, i]``: the final logits' answer margin of the same run (what C4's mediation calls ``m_ablated``).
    """

    def __init__(self, reader: MarginReader, clean_updates: Tensor, n_sets: int) -> None:
        self.reader, self.clean = reader, clean_updates
        self.margins = torch.zeros(n_sets, len(reader.scorer.seqs), device="cpu")
        self.answer = torch.zeros(n_sets, len(reader.scorer.seqs), device="cpu")
        self._seen = torch.zeros(n_sets, len(reader.scorer.seqs), dtype=torch.bool, device="cpu")
        self._store: dict[int, Tensor] = {}
        self.first = 0

    def starting_at(self, first: int) -> MarginTap:
        """This tap, for a call whose first set is random set ``first``."""
        self.first = first
        return self

    def hooks(self, rows: list[int], n_sets: int, offset: int, start: int) -> list[tuple[str, Any]]:
        self._store = {}
        at = self.reader.positions(rows, offset, n_sets)
        return self.reader.hooks(self._store, at, [l for l in self.reader.layers if l >= start])

    def read(self, rows: list[int], sets: list[int], start: int) -> None:
        n = len(sets)
        W = self.reader.W_U.device
        upd = torch.stack(
            [self._store[l] if l >= start else self.clean[rows, j].to(W).repeat(n, 1)
             for j, l in enumerate(self.reader.layers)],
            1,
        )  # fmt: skip
        got = self.reader.margins(self._store[-1], upd, rows, n)
        final = self.reader.answer_margin(self._store[-1], rows, n)
        for k, s in enumerate(sets):
            self.margins[self.first + s, rows] = got[k]
            self.answer[self.first + s, rows] = final[k]
            self._seen[self.first + s, rows] = True

    def measured(self, s: int) -> bool:
        """Whether set ``s`` has a margin for every pair."""
        return bool(self._seen[s].all())


@torch.no_grad()
def margin_with_tap(
    model: HookedModel,
    scorer: KnockoutScorer,
    key_heads: Sequence[tuple[int, int]],
    layers: Sequence[int],
    n_sets: int,
    batch_size: int = 32,
    batch_sets: int = BATCH_SETS,
    keep_clean_mlp: bool = False,
) -> tuple[_VariantRuns, MarginTap]:
    """The clean and key runs (one forward per variant and batch; their margins ``[2, pair]``), and a
    :class:`MarginTap` for ``n_sets`` random sets that the scorer's batched forwards fill
    (:meth:`KnockoutScorer.score_many`'s ``tap``). ``keep_clean_mlp``: keep the clean run's MLP outputs at every
    position (what C4's mediation freezes the MLPs at)."""
    reader = MarginReader(model, scorer, sorted({int(l) for l in layers}))
    key = [Head.of(h) for h in key_heads]
    runs = _variant_margins(reader, [[], key], batch_size, True, batch_sets, keep_clean_mlp)
    return runs, MarginTap(reader, runs.clean_updates, n_sets)
