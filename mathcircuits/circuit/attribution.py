"""An attribution screen for sender → receiver edges, and how well it ranks them against the exact edges.

Exact edges (:mod:`.edges`) need no forward for step 1 (the receiver's new input ``r̃``) but one suffix
forward per sender and pair for step 2. The screen keeps step 1 exact and linearises step 2 (attribution
patching, Nanda 2023; Syed et al. 2023)::

    effect(s → r) ≈ metric.of_change( Σ_p ∂target/∂r[p] · (r̃_s[p] − r[p]) )

over the positions ``p`` the patch changes. One forward and backward per receiver and batch give every
sender's estimate: exact to first order in ``r̃ − r`` (tested against step 2's slope), otherwise a ranking
screen (:func:`screen_agreement`).

TransformerLens 4's edge attribution patching refuses grouped-query attention and estimates direct edges
rather than paths with frozen heads, so it does not serve here.

Usage::

    screen = attribute_edges(model, cache, receiver, senders, [pos], metric)
    exact = exact_edges(model, cache, receiver, senders, [pos], metric)
    screen_agreement(screen.effects, exact.effects, k=10).format()
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float
from scipy.stats import kendalltau, spearmanr
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.circuit.chain import patched_inputs
from mathcircuits.circuit.components import Receiver, Sender
from mathcircuits.circuit.pair_cache import EdgeBatch, PairCache, check_request, receiver_slice
from mathcircuits.models import HookedModel
from mathcircuits.patching.metrics import Metric, answer_readout
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.bootstrap import bootstrap_statistic
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY

__all__ = [
    "ScreenAgreement",
    "attribute_edges",
    "screen_agreement",
]


def hook_gradients(model: HookedModel, cache: PairCache, metric: Metric, names: Sequence[str]) -> dict[str, Tensor]:
    """Gradients of each pair's answer target with respect to several hooks' activations, from one backward.

    A zero tensor requiring a gradient is added at each hook, so values do not change and its gradient is
    the total derivative of the target (every downstream path included). Returns ``{name: [batch, seq, ...]}``.
    """
    zeros: dict[str, Tensor] = {}

    def leaf(act: Tensor, hook: Any, name: str = "") -> Tensor:
        zeros[name] = torch.zeros_like(act, requires_grad=True)
        return act + zeros[name]

    n_ans = cache.all_answers.shape[1]
    with torch.enable_grad():
        fwd = [(n, lambda a, hook, n=n: leaf(a, hook, n)) for n in names]
        logits = model.bridge.run_with_hooks(cache.tokens, fwd_hooks=fwd)[:, -n_ans:]
        target = answer_readout(logits, cache.all_answers, metric).value(metric.target)
        grads = torch.autograd.grad(target.sum(), [zeros[n] for n in names])  # pairs are independent rows
    return {n: g.detach() for n, g in zip(names, grads)}


def receiver_gradient(model: HookedModel, cache: PairCache, receiver: Receiver, metric: Metric) -> Tensor:
    """Gradient of each pair's answer target at the answer positions w.r.t. the receiver's input (head or KV group)."""
    return receiver_slice(receiver, hook_gradients(model, cache, metric, [receiver.hook()])[receiver.hook()])


@torch.no_grad()
def attribute_edges(
    model: HookedModel,
    cache: PairCache,
    receiver: Receiver,
    senders: Sequence[Sender],
    positions: Sequence[int],
    metric: Metric,
    gradient: Tensor | None = None,
    delta: Tensor | None = None,
) -> EdgeBatch:
    """First-order estimates of the effects :func:`~.edges.exact_edges` computes, for every sender at once.

    ``gradient`` (:func:`hook_gradients`, whole hook) and ``delta`` (the senders' residual change as the
    receiver sees it, :func:`~.chain.delta_snapshots`) are computed when None.
    """
    receiver = check_request(model, receiver, senders, cache.structure)
    if receiver.kind == "logits":
        raise FixableValueError(
            "the attribution screen estimates q/k/v/MLP receivers; sender → logits edges are exact without a forward. ",
            "use exact_edges for the logits.",
        )
    B = cache.tokens.shape[0]
    changed, new = patched_inputs(model, cache, receiver, senders, positions, delta)
    if not changed:
        return EdgeBatch(effects=torch.zeros(B, len(senders), device="cpu"), clean_logit=cache.clean.logit)
    full = receiver_gradient(model, cache, receiver, metric) if gradient is None else receiver_slice(receiver, gradient)
    grad = full[:, changed]  # [B, |C|, ...]
    old = receiver_slice(receiver, cache.ref[receiver.hook()])[:, changed]
    change = ((new - old[None]).float() * grad[None].float()).flatten(2).sum(-1)  # [sender, B]
    dev = cache.clean.logit.device  # where the clean answer was read out
    rows = torch.arange(B, device=dev).repeat(len(senders))  # sender-major rows
    eff = metric.of_change(change.reshape(-1).to(dev), cache.clean.take(rows)).reshape(len(senders), B)
    return EdgeBatch(effects=eff.T.float().cpu().contiguous(), clean_logit=cache.clean.logit)


@dataclass(frozen=True)
class ScreenAgreement:
    """How well a screen ranks edges like the exact method, with bootstrap intervals over pairs.

    ``spearman``/``kendall`` (tau-b): over the signed mean effects; ``top_k_overlap``: share of the ``k``
    edges with the largest exact ``|mean effect|`` the screen also ranks top ``k``; ``max_abs_diff`` in
    metric units.
    """

    spearman: Interval
    kendall: Interval
    top_k_overlap: Interval
    k: int
    n_edges: int
    max_abs_diff: float

    def format(self) -> str:
        """One line, e.g. ``"Spearman 0.91 [0.85, 0.95]; top-10 overlap 0.80 [0.60, 0.90] over 150 edges"``."""
        return (
            f"Spearman {self.spearman.format('{:.2f}')}; Kendall {self.kendall.format('{:.2f}')}; top-{self.k} overlap "
            f"{self.top_k_overlap.format('{:.2f}')} over {self.n_edges} edges; max |screen - exact| "
            f"{self.max_abs_diff:.2e}"
        )


def _spearman(rows: Tensor) -> float:
    screen, exact = rows[:, 0].mean(0), rows[:, 1].mean(0)
    return float(spearmanr(screen.numpy(), exact.numpy()).statistic)


def _kendall(rows: Tensor) -> float:
    screen, exact = rows[:, 0].mean(0), rows[:, 1].mean(0)
    return float(kendalltau(screen.numpy(), exact.numpy()).statistic)


def _overlap(k: int):
    def stat(rows: Tensor) -> float:
        screen, exact = rows[:, 0].mean(0).abs(), rows[:, 1].mean(0).abs()
        top_s = set(torch.topk(screen, k).indices.tolist())
        return len(top_s & set(torch.topk(exact, k).indices.tolist())) / k

    return stat


def screen_agreement(
    screen: Float[Tensor, "pair edge"],
    exact: Float[Tensor, "pair edge"],
    k: int = 10,
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> ScreenAgreement:
    """Spearman and Kendall correlations and the top-k overlap of a screen's edges with the exact ones.

    Columns are edges in the same order; pairs are resampled jointly for both; top-k by ``|mean effect|``.
    """
    if screen.shape != exact.shape or screen.ndim != 2:
        raise FixableValueError(
            f"screen {tuple(screen.shape)} and exact {tuple(exact.shape)} effects must both be [pair, edge] of one "
            "shape. ",
            "pass the same edges, in the same order, for the same pairs.",
        )
    if not 1 <= k <= screen.shape[1] or screen.shape[1] < 3:
        raise FixableValueError(
            f"k={k} with {screen.shape[1]} edges: need at least 3 edges and 1 ≤ k ≤ edges. ",
            "compare more edges or lower k.",
        )
    joint = torch.stack([screen.double(), exact.double()], 1)  # [pair, 2, edge]
    return ScreenAgreement(
        spearman=bootstrap_statistic(joint, _spearman, uncertainty),
        kendall=bootstrap_statistic(joint, _kendall, uncertainty),
        top_k_overlap=bootstrap_statistic(joint, _overlap(k), uncertainty),
        k=k,
        n_edges=screen.shape[1],
        max_abs_diff=float((screen.double().mean(0) - exact.double().mean(0)).abs().max()),
    )
