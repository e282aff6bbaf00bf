"""What one discovery round measures: the discovery pairs' batches and caches, and per receiver the senders'
per-pair effects, ranked by the attribution screen first when asked, then measured exactly (:mod:`.discover`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mathcircuits.circuit.attribution import attribute_edges, hook_gradients
from mathcircuits.circuit.batches import CircuitBatch, circuit_batches, label_order
from mathcircuits.circuit.chain import delta_snapshots
from mathcircuits.circuit.components import Receiver, Sender, upstream_senders
from mathcircuits.circuit.config import ScanPositions
from mathcircuits.circuit.pair_cache import EdgeBatch, PairCache, pair_cache
from mathcircuits.data.pairset import PairSet
from mathcircuits.models import HookedModel, hooks
from mathcircuits.patching import Metric

__all__: list[str] = []


class DiscoveryBatches:
    """The discovery pairs: per batch its cache, labels and (lazily) the gradients the screen needs."""

    def __init__(
        self, model: HookedModel, pairs: PairSet, positions: ScanPositions, batch_size: int, need_probs: bool
    ) -> None:
        self.model = model
        self.batches: list[CircuitBatch] = circuit_batches(model, pairs, positions, batch_size)
        self.caches: list[PairCache] = []
        for b in self.batches:
            prompt, cf = b.tokens[:, : b.n_prompt], b.cf_tokens[:, : b.n_prompt]
            self.caches.append(pair_cache(model, prompt, cf, b.answers[:, 0], need_probs, answers=b.answers))
        self.n = sum(len(b.idx) for b in self.batches)
        self.offsets = [0]
        for b in self.batches:
            self.offsets.append(self.offsets[-1] + len(b.idx))
        self.grads: dict[int, dict[str, torch.Tensor]] = {}
        self.snaps: dict[tuple[int, int], dict[int, torch.Tensor]] = {}
        parallel = self.caches[0].structure.parallel
        self.all_senders = upstream_senders(model.spec, Receiver("logits"), parallel)
        self.sender_index = {s: j for j, s in enumerate(self.all_senders)}
        self.labels = sorted({lab for b in self.batches for lab in b.where}, key=label_order)
        self.answer_labels = sorted({lab for b in self.batches for lab in b.answer_labels}, key=label_order)

    def readable(self, label: str, at: str) -> torch.Tensor:
        """Per pair: whether a key/value at ``label`` is read by a node at ``at`` (both present, not later)."""
        out = torch.zeros(self.n, dtype=torch.bool, device="cpu")
        for i, b in enumerate(self.batches):
            if label in b.where and at in b.where and b.where[label] <= b.where[at]:
                out[self.offsets[i] : self.offsets[i + 1]] = True
        return out

    def screen_delta(self, i: int, position: int, layer: int, senders: list[Sender]) -> torch.Tensor:
        """The senders' change at ``position`` as a receiver at ``layer`` sees it (one MLP pass per batch, position)."""
        if (i, position) not in self.snaps:
            self.snaps[(i, position)] = delta_snapshots(self.model, self.caches[i], self.all_senders, position)
        return self.snaps[(i, position)][layer][[self.sender_index[s] for s in senders]]

    def gradient(self, i: int, metric: Metric) -> dict[str, torch.Tensor]:
        """Every receiver hook's gradient for batch ``i`` (one forward and backward, kept)."""
        if i not in self.grads:
            names = [hooks.sub(layer, f"attn.hook_{k}") for layer in range(self.model.spec.n_layers) for k in "qkv"]
            names += [hooks.mlp_in(layer) for layer in range(self.model.spec.n_layers)]
            self.grads[i] = hook_gradients(self.model, self.caches[i], metric, names)
        return self.grads[i]


def measure_senders(
    data: DiscoveryBatches,
    receiver: Receiver,
    at: str | None,
    label: str,
    senders: list[Sender],
    metric: Metric,
    edge_fn: Callable[..., EdgeBatch],
    screen: int | None,
) -> list[tuple[Sender, torch.Tensor]]:
    """Per-pair effects (NaN where a batch lacks the label) of senders patched at ``label`` on the receiver.

    ``at``: the q/MLP receiver's own label (None for k/v and the logits). With ``screen``, the attribution screen
    ranks the senders first.
    """

    def run(estimate: bool, chosen: list[Sender]) -> torch.Tensor:
        out = torch.full((data.n, len(chosen)), float("nan"), device="cpu")
        for i, (b, cache) in enumerate(zip(data.batches, data.caches)):
            if label not in b.where or (at is not None and at not in b.where):
                continue
            p = b.where[label]
            if p < b.first_diff:
                out[data.offsets[i] : data.offsets[i + 1]] = 0.0  # identical in both runs: no effect, exactly
                continue
            r = receiver if at is None else Receiver(receiver.kind, receiver.layer, receiver.head, position=b.where[at])
            if estimate:
                grad = data.gradient(i, metric)[r.hook()]
                delta = data.screen_delta(i, p, r.layer, chosen)
                eff = attribute_edges(data.model, cache, r, chosen, [p], metric, gradient=grad, delta=delta).effects
            else:
                eff = edge_fn(data.model, cache, r, chosen, [p], metric).effects
            out[data.offsets[i] : data.offsets[i + 1]] = eff
        return out

    if screen is not None and screen < len(senders) and receiver.kind != "logits":
        estimate = run(True, senders).nanmean(0).abs().nan_to_num(0.0)
        keep = sorted(torch.topk(estimate, screen).indices.tolist())
        senders = [senders[i] for i in keep]
    eff = run(False, senders)
    return [(s, eff[:, j]) for j, s in enumerate(senders)]
