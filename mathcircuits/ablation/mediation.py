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
from mathcircuits.ablation.scorer import BATCH_SETS, KnockoutScorer
from mathcircuits.data.pairset import PairSet
from mathcircuits.models import HookedModel, fast_paths_enabled, final_norm, hooks
from mathcircuits.models.families import block_structure
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
    ``batch_sets``: head sets run in one forward, each on its own copy of a batch.
    """
    spec = model.spec
    layers = sorted({int(l) for l in layers})
    if not layers or not all(0 <= l < spec.n_layers for l in layers):
        raise FixableValueError(
            f"layers {layers} must be a non-empty subset of 0..{spec.n_layers - 1}. ", "pass MLP layers."
        )
    pairs.require(("tokens", "answer_tokens", "n_tokens"), "mlp_mediation")
    pairs.require_model(model, "mlp_mediation")
    heads = [Head.of(h) for h in key_heads]
    scorer = scorer or KnockoutScorer(model, pairs, ablation, means, scope, seed, batch_size, reuse_clean=False)
    structure = block_structure(model)
    W_U = model.bridge.W_U.float()
    answer = [int(a[0]) for a in scorer.answers]
    cand = torch.tensor(sorted(set(answer)), device=W_U.device)
    n = len(scorer.seqs)
    sets = [heads, *[[Head.of(h) for h in r] for r in random_sets]]
    clean = torch.zeros(n, device="cpu")  # result buffers, on the host
    out = {f: torch.zeros(len(sets), n, device="cpu") for f in (False, True)}  # frozen → margins
    fast = fast and fast_paths_enabled() and not (scorer.ablation == "mean" and scorer.scope == "all")
    for g, grp in enumerate(scorer.groups):
        p = grp.shared if fast else 0
        rows = grp.rows
        for j in range(0, len(rows), batch_size):
            part = rows[j : j + batch_size]
            toks = torch.tensor([scorer.seqs[i] for i in part], device=model.device)
            pos = torch.tensor([scorer.n_prompt[i] - 1 - p for i in part], device=model.device)
            vals = scorer._values(g, part, fast=p > 0)
            ans = torch.tensor([answer[i] for i in part], device=W_U.device)
            others = (cand[None, :] != ans[:, None]).float()
            w_dir = W_U[:, ans].T - (others @ W_U[:, cand].T) / others.sum(-1, keepdim=True).clamp(min=1)  # [b, d]

            def margin(final: Tensor, copies: int, w_dir: Tensor = w_dir) -> Tensor:
                x = final_norm(model, structure, final[:, None, :])[:, 0]
                return (x * w_dir.repeat(copies, 1)).sum(-1).reshape(copies, -1).cpu()

            def run(
                extra: list[tuple[str, Any]], copies: int, pos: Tensor = pos, toks: Tensor = toks, p: int = p
            ) -> Tensor:
                got: dict[str, Tensor] = {}

                def grab(act: Tensor, hook: Any) -> None:
                    at = pos.repeat(copies).to(act.device)
                    got["x"] = act[torch.arange(act.shape[0], device=act.device), at].float().to(W_U.device)

                scorer._run(toks.repeat(copies, 1), p, extra + [(hooks.resid_post(spec.n_layers - 1), grab)])
                return got["x"]

            saved: dict[int, Tensor] = {}

            def keep(act: Tensor, hook: Any, saved: dict[int, Tensor] = saved) -> None:
                saved[int(hook.name.split(".")[1])] = act.detach().clone()

            clean[part] = margin(run([(hooks.mlp_out(l), keep) for l in layers], 1), 1)[0]
            per = scorer.sets_per_forward(part, batch_sets)
            for v in range(0, len(sets), per):
                chunk = sets[v : v + per]
                k = len(chunk)

                def freeze(act: Tensor, hook: Any, k: int = k, saved: dict[int, Tensor] = saved) -> Tensor:
                    return saved[int(hook.name.split(".")[1])].to(act.device, act.dtype).repeat(k, 1, 1)

                ko = set_ablation_hooks(model, chunk, vals, scope)
                out[False][v : v + k, part] = margin(run(ko, k), k)
                out[True][v : v + k, part] = margin(run(ko + [(hooks.mlp_out(l), freeze) for l in layers], k), k)
    return MLPMediation(
        key_heads=heads,
        layers=layers,
        clean_margin=clean,
        ablated_margin=out[False],
        frozen_margin=out[True],
        operations=list(pairs.operations) if pairs.has("operation") else ["?"] * n,
        template_ids=list(pairs.template_ids) if pairs.has("template_id") else ["?"] * n,
        pair_ids=list(pairs.pair_ids) if pairs.has("pair_id") else list(range(n)),
        ablation=ablation,
        scope=scope,
        random_heads=sets[1:],
    )
