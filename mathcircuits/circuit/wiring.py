"""What a circuit run keeps and what the rest takes: :class:`Wiring` and :class:`AblationValues`.

:class:`AblationValues` are the paired counterfactual run's own values (:func:`resample_values`) or a
pool's position means (:mod:`.pool`); :mod:`.intervene` runs a model with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.circuit.batches import CircuitBatch
from mathcircuits.circuit.components import Receiver, Sender
from mathcircuits.circuit.config import AblationKind, MLPMode
from mathcircuits.models import HookedModel, PrefixCaches, hooks, repeat_cache

__all__ = [
    "LOGITS",
]

ABLATION_KINDS: tuple[str, ...] = get_args(AblationKind)
MLP_MODES: tuple[str, ...] = get_args(MLPMode)
NodeKey = tuple[str, int, int, str]  # (kind, layer, head, position label); the logits: ("logits", -1, -1, "")
LOGITS: NodeKey = ("logits", -1, -1, "")


@dataclass(frozen=True)
class Wiring:
    """What a circuit run keeps: nodes and, for an edge-level run, the edges between them.

    Args:
        edges: ``(sender, receiver, via)``, receiver a node or :data:`LOGITS`; None: node level (every node
            reads every other).
        complement: the nodes are the ones *ablated*, everything else computes (``M \\ K``; node level only).
        input: the token embeddings are a sender (MIB's graph): a receiver reads the clean embedding only
            through an edge from :func:`input_node`, else the counterfactual's. False: always clean (our circuits).
    """

    nodes: frozenset[NodeKey]
    edges: frozenset[tuple[NodeKey, NodeKey, str]] | None = None
    complement: bool = False
    input: bool = False

    def __post_init__(self) -> None:
        if self.complement and self.edges is not None:
            raise FixableValueError("a complement wiring (the model without some nodes) is node level. ", "edges=None.")
        if self.input and self.edges is None:
            raise FixableValueError(
                "a wiring whose input is a sender must be edge level. ", "give edges (maybe empty)."
            )


def input_node(label: str) -> NodeKey:
    """The token embeddings at a position label, as the sender of a :class:`Wiring` with ``input=True``."""
    return ("input", -1, -1, label)


@dataclass(frozen=True)
class AblationValues:
    """The values ablated components take at the query positions ``start…`` of one batch.

    ``z`` ``[rows, pos, layer, head, d_head]``, ``mlp`` ``[rows, pos, layer, d_model]``: one row per pair
    (resample) or one shared (a mean); ``embed``: the residual before the first block, for input senders.
    """

    z: Float[Tensor, "rows pos layer head d_head"]
    mlp: Float[Tensor, "rows pos layer d_model"]
    start: int
    embed: Float[Tensor, "rows pos d_model"] | None = None


def prefix_kv(model: HookedModel, tokens: Tensor, start: int, store: PrefixCaches) -> Any:
    key = tuple(tokens[0, :start].tolist())
    if key not in store:
        _, store[key] = model.bridge(tokens[:1, :start], return_type="logits_and_cache")
    return store[key]


@torch.no_grad()
def record_values(model: HookedModel, tokens: Tensor, start: int, store: PrefixCaches) -> AblationValues:
    """``hook_z`` and ``hook_mlp_out`` of every layer at positions ``start…`` of ``tokens`` (whose prefix is shared)."""
    spec = model.spec
    B, S = tokens.shape[0], tokens.shape[1] - start
    z = torch.empty(B, S, spec.n_layers, spec.n_heads, spec.d_head, device="cpu")
    mlp = torch.empty(B, S, spec.n_layers, spec.d_model, device="cpu")
    embed = torch.empty(B, S, spec.d_model, device="cpu")

    def grab_e(act: Tensor, hook: Any) -> None:
        embed[:] = act[:, -S:].float().cpu()

    def grab_z(act: Tensor, hook: Any, layer: int = 0) -> None:
        z[:, :, layer] = act[:, -S:].float().cpu()

    def grab_m(act: Tensor, hook: Any, layer: int = 0) -> None:
        mlp[:, :, layer] = act[:, -S:].float().cpu()

    fwd: list[tuple[str, Any]] = [(hooks.resid_pre(0), grab_e)]
    for layer in range(spec.n_layers):
        fwd += [(hooks.z(layer), lambda a, hook, layer=layer: grab_z(a, hook, layer))]
        fwd += [(hooks.mlp_out(layer), lambda a, hook, layer=layer: grab_m(a, hook, layer))]
    if start > 0:
        kv = repeat_cache(prefix_kv(model, tokens, start, store), B)
        model.bridge.run_with_hooks(tokens[:, start:], fwd_hooks=fwd, past_key_values=kv)
    else:
        model.bridge.run_with_hooks(tokens, fwd_hooks=fwd)
    return AblationValues(z, mlp, start, embed)


def resample_values(model: HookedModel, batch: CircuitBatch, store: PrefixCaches | None = None) -> AblationValues:
    """Each pair's own counterfactual run (its prompt + the same answer tokens) at the query positions."""
    return record_values(model, batch.cf_tokens, batch.prefix_len, {} if store is None else store)


def upstream(s: NodeKey, r: NodeKey, parallel: bool) -> bool:
    """Whether node ``s``'s output can reach node ``r``'s input (``r`` may be the logits)."""
    if r == LOGITS or s[0] == "input":
        return True
    sender = Sender("head", s[1], s[2]) if s[0] == "head" else Sender("mlp", s[1])
    return Receiver("mlp" if r[0] == "mlp" else "q", r[1]).is_downstream_of(sender, parallel)


def without_mlps(wiring: Wiring) -> Wiring:
    """The wiring for ``mlps="keep"``: MLPs are no nodes, they always compute and every receiver reads them."""
    nodes = frozenset(n for n in wiring.nodes if n[0] != "mlp")
    edges = (
        None
        if wiring.edges is None
        else frozenset(e for e in wiring.edges if (e[0] in nodes or e[0][0] == "input") and e[1][0] != "mlp")
    )
    return Wiring(nodes, edges, input=wiring.input)
