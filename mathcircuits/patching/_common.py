"""The patching core shared by the three methods (exact, reference, attribution).

* :class:`PairBatch` and :func:`pair_batches`: equal-length pairs as tensors;
* :class:`Senders` and :class:`BatchEffects`: what a method scans and returns.
  Every method's scan has the one signature :data:`ScanFn`, so the driver
  dispatches by a table;
* :class:`LastPositionCache` and :func:`last_position_caches`: the reference and
  counterfactual activations at the patched position (the method's two
  forward passes), with the clean :class:`~mathcircuits.patching.metrics.Readout`;
* :func:`readout`, :func:`attn_change`, :func:`mlp_change`: the last-position
  chain of a block, read from the family's
  :class:`~mathcircuits.models.families.BlockStructure` (sequential or parallel
  attention+MLP, output norms, logit soft cap).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mathcircuits.data.batching import iter_batches
from mathcircuits.models import hooks
from mathcircuits.models.families import BlockStructure, block_structure
from mathcircuits.models.prefix import PrefixRunner
from mathcircuits.patching.metrics import Metric, Readout

__all__ = [
    "BatchEffects",
    "LastPositionCache",
    "PairBatch",
    "ScanFn",
    "Senders",
    "attn_change",
    "capture",
    "check_dataset",
    "last_position_caches",
    "mlp_change",
    "pair_batches",
    "readout",
]

_REQUIRED = ("tokens", "cf_tokens", "answer_token")


@dataclass(frozen=True)
class PairBatch:
    """Pairs of equal token length: reference and counterfactual tokens, the answer's first token."""

    idx: list[int]
    tokens: Int[Tensor, "batch seq"]
    cf_tokens: Int[Tensor, "batch seq"]
    answer: Int[Tensor, " batch"]


@dataclass(frozen=True)
class Senders:
    """Which senders a scan patches: every head, every MLP, or both (``only`` narrows the reference scan).

    ``only`` — ``{("head", layer, head), ("mlp", layer, -1), ...}``: the reference scan runs just these
    senders (NaN elsewhere); the exact scan computes every sender anyway, at the cost of two forwards.
    """

    heads: bool = True
    mlps: bool = True
    only: frozenset[tuple[str, int, int]] | None = None

    def wants(self, kind: str, layer: int, head: int = -1) -> bool:
        """Whether the sender ``(kind, layer, head)`` is scanned."""
        chosen = self.heads if kind == "head" else self.mlps
        return chosen and (self.only is None or (kind, layer, head) in self.only)

    @classmethod
    def from_names(cls, names: Sequence[str]) -> Senders:
        bad = [s for s in names if s not in ("heads", "mlps")]
        if bad or not names:
            raise ValueError(
                f"senders {list(names)} are not understood. Fix: use ('heads',), ('mlps',) or ('heads', 'mlps')."
            )
        return cls(heads="heads" in names, mlps="mlps" in names)


@dataclass(frozen=True)
class BatchEffects:
    """One batch's effects (NaN for senders not scanned) and the clean answer logits."""

    heads: Float[Tensor, "batch layer head"]
    mlps: Float[Tensor, "batch layer"]
    clean_logit: Float[Tensor, " batch"]


class ScanFn(Protocol):
    """The one signature of the three methods' scan functions."""

    def __call__(
        self, model: Any, batch: PairBatch, senders: Senders, metric: Metric, *, chunk_rows: int, progress: bool
    ) -> BatchEffects: ...


def check_dataset(dataset: Any, spec: Any) -> None:
    """Clear errors for datasets patching cannot use.

    Args:
        dataset: a ``datasets.Dataset`` from :func:`mathcircuits.data.generate_pairs` (needs ``tokens``,
            ``cf_tokens`` and ``answer_token``).
        spec: the model's spec (its ``vocab_size`` bounds the answer tokens).

    Returns:
        None; it only raises.

    Raises:
        ValueError: if columns are missing, the dataset is empty, a pair's reference and counterfactual prompts
            differ in token length, or an answer token is outside the vocabulary.
    """
    missing = [c for c in _REQUIRED if c not in dataset.column_names]
    if missing:
        raise ValueError(f"the dataset lacks columns {missing}. Fix: build it with mathcircuits.data.generate_pairs.")
    if len(dataset) == 0:
        raise ValueError("the dataset is empty. Fix: generate pairs (and keep some that the model answers correctly).")
    for i, (t, c) in enumerate(zip(dataset["tokens"], dataset["cf_tokens"])):
        if len(t) != len(c):
            raise ValueError(
                f"pair {i}: the reference prompt has {len(t)} tokens but the counterfactual has {len(c)}. "
                "Path patching needs token-aligned pairs. "
                "Fix: regenerate with counterfactual words that tokenize like the operator."
            )
    vocab = spec.vocab_size
    bad = [i for i, a in enumerate(dataset["answer_token"]) if not 0 <= a < vocab]
    if bad:
        raise ValueError(
            f"pairs {bad[:5]} have answer tokens outside the model's vocabulary ({vocab}). "
            "Fix: generate the pairs with this model's tokenizer."
        )


def pair_batches(dataset: Any, batch_size: int, device: torch.device | str) -> list[PairBatch]:
    """Batches of pairs with equal token length (no padding, so the last position is the same for all).

    Args:
        dataset: a ``datasets.Dataset`` with ``tokens``, ``cf_tokens`` and ``answer_token`` (and optionally
            ``template_id``, so that a batch shares one template).
        batch_size: at most this many pairs per batch.
        device: where the batch tensors go.

    Returns:
        A list of :class:`PairBatch`: row indices, ``tokens`` and ``cf_tokens`` of shape ``[batch, seq]`` and
        ``answer`` of shape ``[batch]``.
    """
    cols = {"tokens": dataset["tokens"], "cf_tokens": dataset["cf_tokens"], "answer": dataset["answer_token"]}
    if "template_id" in dataset.column_names:  # one template per batch: its few-shot prefix runs once
        cols["template_id"] = dataset["template_id"]
    return [PairBatch(idx=idx, **b) for idx, b in iter_batches(cols, batch_size, device, group_by="template_id")]


@torch.no_grad()
def capture(
    bridge: Any,
    tokens: Int[Tensor, "batch seq"],
    names: list[str],
    position: int | None = -1,
    cache_store: dict[tuple[int, ...], Any] | None = None,
) -> tuple[Float[Tensor, "batch *pos vocab"], dict[str, Tensor]]:
    """One forward; the logits and each named activation at ``position`` (every position when ``None``).

    Args:
        bridge: the TransformerBridge.
        tokens: the prompts.
        names: hook names to read.
        position: the position read (``-1``, the last), or ``None`` for every position.
        cache_store: with ``position == -1``, a dict of clean prefix KV caches: the batch's shared prefix then
            runs once (:class:`~mathcircuits.models.prefix.PrefixRunner`) and is reused by later calls.

    Returns:
        The logits at ``position`` and ``{name: activation at position}``.
    """
    store: dict[str, Tensor] = {}
    where = slice(None) if position is None else position

    def make(name: str) -> Any:
        # keyed by the requested name: the bridge may report an aliased hook.name
        def hook(act: Tensor, hook: Any) -> None:
            store[name] = act[:, where].detach().clone()

        return hook

    fwd = [(n, make(n)) for n in names]
    if position == -1 and cache_store is not None:
        logits = PrefixRunner(bridge, fwd, store=cache_store).logits_from(tokens, tokens.shape[1] - 1)
        return logits[:, -1], store
    # only the last position's logits are needed: skip the unembedding elsewhere
    extra = {"logits_to_keep": 1} if position == -1 else {}
    logits = bridge.run_with_hooks(tokens, fwd_hooks=fwd, **extra)
    return (logits if position is None else logits[:, position]), store


def _chunked(fn: Callable[[Tensor], Tensor], x: Tensor, chunk_rows: int) -> Tensor:
    if x.shape[0] <= chunk_rows:
        return fn(x)
    return torch.cat([fn(c) for c in x.split(chunk_rows)])


def _apply_cap(logits: Tensor, structure: BlockStructure) -> Tensor:
    cap = structure.logit_softcap
    return logits if cap is None else cap * torch.tanh(logits / cap)


def readout(
    model: Any,
    structure: BlockStructure,
    resid: Float[Tensor, "rows d_model"],
    answer: Int[Tensor, " rows"],
    need_probs: bool,
) -> Readout:
    """The answer's logit (and probability) from final residual vectors: final norm, unembedding, soft cap.

    Args:
        model: the hooked model.
        structure: its block structure (final norm module and logit soft cap).
        resid: the residual stream after the last block, one row per readout.
        answer: the answer token of each row.
        need_probs: also compute the probability (a softmax over the whole vocabulary).

    Returns:
        The :class:`Readout` of each row.
    """
    bridge = model.bridge
    normed = getattr(bridge, structure.final_norm)(resid)
    if need_probs:
        logits = _apply_cap(bridge.unembed(normed), structure)
        probs = torch.softmax(logits.float(), -1)
        return Readout(logits.gather(-1, answer[:, None])[:, 0], probs.gather(-1, answer[:, None])[:, 0])
    out = (normed * bridge.W_U[:, answer].T).sum(-1)  # only the answer's column of the unembedding
    b_u = getattr(bridge, "b_U", None)
    if b_u is not None and torch.is_tensor(b_u):
        out = out + b_u[answer]
    return Readout(_apply_cap(out, structure))


def attn_change(
    model: Any,
    structure: BlockStructure,
    layer: int,
    pre: Float[Tensor, "rows d_model"] | None,
    change: Float[Tensor, "rows d_model"],
) -> Float[Tensor, "rows d_model"]:
    """Change of the residual when attention's output (before any output norm) changes by ``change``.

    Args:
        pre: the reference attention output before its output norm (``None`` when the family has none).
        change: the change of that output, e.g. ``(z' − z) W_O`` of one head.

    Returns:
        ``P(pre + change) − P(pre)`` for families with a post-attention norm ``P``, else ``change``.
    """
    if structure.attn_out_norm is None:
        return change
    norm = getattr(model.bridge.blocks[layer], structure.attn_out_norm)
    return norm(pre + change) - norm(pre)


def mlp_change(
    model: Any,
    structure: BlockStructure,
    layer: int,
    base: Float[Tensor, "rows d_model"],
    delta: Float[Tensor, "rows d_model"],
    mlp_out: Float[Tensor, "rows d_model"],
    chunk_rows: int = 8192,
) -> Float[Tensor, "rows d_model"]:
    """How much the MLP block's contribution to the residual changes when its input residual moves by ``delta``.

    Args:
        base: the reference residual the MLP reads (``resid_mid``, or ``resid_pre`` in parallel blocks).
        delta: the change of that residual.
        mlp_out: the reference contribution (``hook_mlp_out``, after the output norm if any).
        chunk_rows: rows per MLP call, to bound memory.

    Returns:
        ``P2(M(N2(base + delta))) − mlp_out`` (without the norms the family does not have).
    """
    block = model.bridge.blocks[layer]
    in_norm = getattr(block, structure.mlp_in_norm) if structure.mlp_in_norm else None
    out_norm = getattr(block, structure.mlp_out_norm) if structure.mlp_out_norm else None

    def run(x: Tensor) -> Tensor:
        y = block.mlp(in_norm(x) if in_norm is not None else x)
        return out_norm(y) if out_norm is not None else y

    return _chunked(run, base + delta, chunk_rows) - mlp_out


@dataclass(frozen=True)
class LastPositionCache:
    """Reference and counterfactual activations at the patched position, keyed by hook name.

    ``ref`` holds, per layer, ``hook_z``, ``hook_mlp_out``, the residual the MLP
    reads and (with post-attention norms) the attention output before that norm,
    plus the last block's ``hook_resid_post``; ``cf`` holds ``hook_z`` and
    ``hook_mlp_out``. ``logits`` are the reference run's logits at the position.
    """

    logits: Float[Tensor, "batch vocab"]
    ref: dict[str, Tensor]
    cf: dict[str, Tensor]
    structure: BlockStructure

    def clean(self, answer: Int[Tensor, " batch"], need_probs: bool) -> Readout:
        """The unpatched readout of each pair (soft cap already applied by the model)."""
        logit = self.logits.gather(-1, answer[:, None])[:, 0]
        if not need_probs:
            return Readout(logit)
        return Readout(logit, torch.softmax(self.logits.float(), -1).gather(-1, answer[:, None])[:, 0])


def attn_pre_norm_name(structure: BlockStructure, layer: int) -> str | None:
    """Hook of the attention output before the post-attention norm (``None`` without one)."""
    return None if structure.attn_out_norm is None else hooks.sub(layer, f"{structure.attn_out_norm}.hook_in")


def last_position_caches(
    model: Any,
    tokens: Int[Tensor, "batch seq"],
    cf_tokens: Int[Tensor, "batch seq"],
    position: int = -1,
    structure: BlockStructure | None = None,
    share_prefix: bool = True,
) -> LastPositionCache:
    """The two forward passes of the method: reference and counterfactual activations at ``position``.

    Args:
        model: the hooked model.
        tokens: reference prompts.
        cf_tokens: counterfactual prompts, token-aligned with ``tokens``.
        position: the patched position.
        structure: the model's block structure (looked up when not given).
        share_prefix: run the prefix that all reference and counterfactual prompts share once
            (exact; ``False`` runs the two plain forwards, for checking).

    Returns:
        A :class:`LastPositionCache`.
    """
    structure = structure or block_structure(model)
    n_layers = model.spec.n_layers
    names = [hooks.resid_post(n_layers - 1)]
    for layer in range(n_layers):
        names += [hooks.z(layer), hooks.mlp_out(layer), hooks.sub(layer, structure.mlp_reads)]
        pre = attn_pre_norm_name(structure, layer)
        if pre is not None:
            names.append(pre)
    # reference and counterfactual prompts differ only in the query: one clean prefix cache serves both
    caches: dict[tuple[int, ...], Any] | None = {} if share_prefix and position == -1 else None
    logits, ref = capture(model.bridge, tokens, names, position, caches)
    cf_names = [n for layer in range(n_layers) for n in (hooks.z(layer), hooks.mlp_out(layer))]
    _, cf = capture(model.bridge, cf_tokens, cf_names, position, caches)
    return LastPositionCache(logits=logits, ref=ref, cf=cf, structure=structure)
