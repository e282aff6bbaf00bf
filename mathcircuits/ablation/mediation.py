"""How much of the key heads' effect on the answer reaches it *through* the later MLPs (claim C4 as mediation).

Knocking the key heads out lowers the answer margin ``m`` (the answer's logit over the mean of the other candidate
numbers' at the position that predicts the first answer token) by the **total** effect ``T = m_clean − m_ablated``.
Run the same knockout again with the MLPs in ``layers`` frozen at their clean outputs (every position): what is
still lost, ``D = m_clean − m_frozen``, went around those MLPs (the direct path and paths through other
components); the rest, ``M = T − D = m_frozen − m_ablated``, is **mediated** by them: the path-patching split of
the heads' effect into the paths through the later MLPs and the others (Wang et al. 2023; Goldowsky-Dill et al.
2023). The same split for C2's depth-matched random sets is the null: a set of heads upstream of the MLPs has part
of its effect mediated by them just by sitting there; C4 asks whether the MLPs carry a larger share of the key
heads' effect, ``M_key / T_key``, than of the random sets', ``Σ M_r / Σ T_r``.

Usage::

    med = mlp_mediation(model, fresh_pairs, key.heads, layers=range(14, 30), random_sets=control.draws)
    med.share(0), med.pooled_random_share()
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
from mathcircuits.ablation.hooks import Ablation, Scope, set_ablation_hooks
from mathcircuits.ablation.means import HeadMeans
from mathcircuits.ablation.mlp_margin import MarginReader, check_layers
from mathcircuits.ablation.scorer import BATCH_SETS, KnockoutScorer
from mathcircuits.data.pairset import PairSet
from mathcircuits.models import HookedModel, fast_paths_enabled, hooks
from mathcircuits.models.heads import Head

__all__ = ["MLPMediation", "mlp_mediation"]


@dataclass(frozen=True, repr=False)
class MLPMediation(SavedResult):
    """The answer margin per pair: clean, and per head set (row 0 the key heads, then the random sets) knocked out
    with the MLPs in ``layers`` free (``ablated``) or frozen at their clean outputs (``frozen``); logits."""

    key_heads: list[Head]
    layers: list[int]
    clean_margin: Float[Tensor, " pair"]
    ablated_margin: Float[Tensor, "set pair"]
    frozen_margin: Float[Tensor, "set pair"]
    operations: list[str]
    template_ids: list[str]
    pair_ids: list[int]
    ablation: Ablation = "position_mean"
    scope: Scope = "all"
    random_heads: list[list[Head]] = field(default_factory=list)

    STAGE = "validate"
    VERSION = 1

    def __post_init__(self) -> None:
        shape = (1 + len(self.random_heads), len(self.pair_ids))
        if tuple(self.ablated_margin.shape) != shape or tuple(self.frozen_margin.shape) != shape:
            raise FixableValueError(
                f"MLPMediation has margins of shapes {tuple(self.ablated_margin.shape)} and "
                f"{tuple(self.frozen_margin.shape)} for the key set, {len(self.random_heads)} random sets and "
                f"{len(self.pair_ids)} pairs. ",
                "pass one row per head set (the key set first) and one column per pair.",
            )

    @property
    def total(self) -> Float[Tensor, "set pair"]:
        """Per set and pair: the margin lost with the set knocked out (``T``)."""
        return self.clean_margin[None] - self.ablated_margin

    @property
    def mediated(self) -> Float[Tensor, "set pair"]:
        """Per set and pair: the part of ``T`` that the MLPs in ``layers`` carry (``M = m_frozen − m_ablated``)."""
        return self.frozen_margin - self.ablated_margin

    def share(self, s: int = 0) -> float:
        """Set ``s``'s mediated share, ``mean M / mean T`` (0: the key set; NaN when ``mean T`` is 0)."""
        t = float(self.total[s].mean())
        return float(self.mediated[s].mean()) / t if t != 0 else float("nan")

    def pooled_random_share(self) -> float:
        """The random sets' mediated share, ``Σ M_r / Σ T_r`` over sets and pairs (NaN without random sets)."""
        if not self.random_heads:
            return float("nan")
        t = float(self.total[1:].sum())
        return float(self.mediated[1:].sum()) / t if t != 0 else float("nan")

    def summary_items(self) -> list[tuple[str, str]]:
        """Layers, pairs, and the key set's total and mediated effect."""
        return [
            ("MLP layers", f"L{min(self.layers)}–L{max(self.layers)}"),
            ("pairs", str(len(self.pair_ids))),
            (
                "key heads' effect on the answer margin",
                f"{float(self.total[0].mean()):.2f} logits, {float(self.mediated[0].mean()):.2f} through the MLPs",
            ),
        ]


@torch.no_grad()
def mlp_mediation(
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
) -> MLPMediation:
    """The answer margin clean, and with ``key_heads`` (then each of ``random_sets``) knocked out, with the MLPs in
    ``layers`` free and frozen at their clean outputs (module docstring).

    ``scorer``: one built on ``pairs`` with the same ablation (reuses its replacement values). ``fast``: run the
    positions a template's prompts share once, clean, as :func:`~mathcircuits.ablation.mlp_margin` does (exact).
    ``batch_sets``: head sets run in one forward, each on its own copy of a batch. Every run is whole (from the
    shared prefix on): the reference of :func:`~mathcircuits.ablation.control_margin_mediation`, which reads the
    free runs from C2's forwards and resumes the frozen ones at each set's lowest layer.
    """
    spec = model.spec
    layers = check_layers(layers, spec.n_layers)
    pairs.require(("tokens", "answer_tokens", "n_tokens"), "mlp_mediation")
    pairs.require_model(model, "mlp_mediation")
    heads = [Head.of(h) for h in key_heads]
    scorer = scorer or KnockoutScorer(model, pairs, ablation, means, scope, seed, batch_size, reuse_clean=False)
    reader = MarginReader(model, scorer, layers)
    n = len(scorer.seqs)
    sets = [heads, *[[Head.of(h) for h in r] for r in random_sets]]
    clean = torch.zeros(n, device="cpu")  # result buffers, on the host
    out = {f: torch.zeros(len(sets), n, device="cpu") for f in (False, True)}  # frozen → margins
    fast = fast and fast_paths_enabled() and not (scorer.ablation == "mean" and scorer.scope == "all")
    for g, grp in enumerate(scorer.groups):
        p = grp.shared if fast else 0
        for j in range(0, len(grp.rows), batch_size):
            part = grp.rows[j : j + batch_size]
            toks = torch.tensor([scorer.seqs[i] for i in part], device=model.device)
            vals = scorer._values(g, part, fast=p > 0)

            def run(extra: list[tuple[str, Any]], k: int, part: list[int] = part, toks: Tensor = toks, p: int = p):
                store: dict[int, Tensor] = {}
                scorer._run(toks.repeat(k, 1), p, extra + reader.hooks(store, reader.positions(part, p, k), []))
                return reader.answer_margin(store[-1], part, k)

            saved: dict[int, Tensor] = {}
            clean[part] = run([(hooks.mlp_out(l), _keep(saved, l)) for l in layers], 1)[0]
            per = scorer.sets_per_forward(part, batch_sets)
            for v in range(0, len(sets), per):
                chunk = sets[v : v + per]
                k = len(chunk)
                ko = set_ablation_hooks(model, chunk, vals, scope)
                out[False][v : v + k, part] = run(ko, k)
                out[True][v : v + k, part] = run(ko + [(hooks.mlp_out(l), _frozen(saved[l], k)) for l in layers], k)
    return _result(pairs, heads, layers, clean, out[False], out[True], sets[1:], ablation, scope)


def _keep(into: dict[int, Tensor], layer: int) -> Any:
    def fn(act: Tensor, hook: Any) -> None:
        into[layer] = act.detach().clone()

    return fn


def _frozen(value: Tensor, copies: int) -> Any:
    """A hook replacing an MLP's output by ``value`` ``[rows, pos, d]``, repeated for ``copies`` set blocks."""

    def fn(act: Tensor, hook: Any) -> Tensor:
        return value.to(act.device, act.dtype).repeat(copies, 1, 1)

    return fn


def _result(
    pairs: PairSet,
    heads: list[Head],
    layers: list[int],
    clean: Tensor,
    ablated: Tensor,
    frozen: Tensor,
    random_sets: list[list[Head]],
    ablation: Ablation,
    scope: Scope,
) -> MLPMediation:
    return MLPMediation(
        key_heads=heads,
        layers=layers,
        clean_margin=clean,
        ablated_margin=ablated,
        frozen_margin=frozen,
        **pairs.labels(),
        ablation=ablation,
        scope=scope,
        random_heads=random_sets,
    )


class FreezeTap:
    """The frozen runs of C4's mediation as a :class:`~mathcircuits.ablation.scorer.Tap` on batched knockout
    forwards: the MLPs in the reader's layers output their clean values (every run position), and the final
    answer margin is read. A forward resumed at block ``k`` runs no MLP below ``k``: those are the clean run's
    anyway. ``frozen[s, i]``: set ``s`` (its index in :meth:`KnockoutScorer.logits_many`'s ``sets``), pair ``i``.

    ``clean_mlp``: per pair, its clean MLP outputs ``[L, pos, d]`` from the positions the scorer's forwards start
    at (the shared prefix's end) on.
    """

    def __init__(self, reader: MarginReader, clean_mlp: dict[int, Tensor], n_sets: int) -> None:
        self.reader, self.clean = reader, clean_mlp
        self.frozen = torch.zeros(n_sets, len(reader.scorer.seqs), device="cpu")
        self._store: dict[int, Tensor] = {}

    def hooks(self, rows: list[int], n_sets: int, offset: int, start: int) -> list[tuple[str, Any]]:
        self._store = {}
        clean = torch.stack([self.clean[i] for i in rows])  # [rows, L, pos, d]
        freeze = [(hooks.mlp_out(l), _frozen(clean[:, j], n_sets))
                  for j, l in enumerate(self.reader.layers) if l >= start]  # fmt: skip
        return freeze + self.reader.hooks(self._store, self.reader.positions(rows, offset, n_sets), [])

    def read(self, rows: list[int], sets: list[int], start: int) -> None:
        got = self.reader.answer_margin(self._store[-1], rows, len(sets))
        for k, s in enumerate(sets):
            self.frozen[s, rows] = got[k]
