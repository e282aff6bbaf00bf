"""One batch of pairs cached for sender → receiver path patching, and what the methods share about a receiver.

The reference run is cached at every position (per layer ``hook_z``, ``hook_mlp_out``, ``hook_resid_pre``,
the MLP's input residual, ``hook_q/k/v``, the MLP's input, the attention output before a post-attention
norm, and the last ``hook_resid_post``); the counterfactual run at ``hook_z`` and ``hook_mlp_out``. With
the answer's tokens, both sequences are teacher-forced and every answer position is read out.

Usage::

    cache = pair_cache(model, tokens, cf_tokens, answer_tokens[:, 0], answers=answer_tokens)
    cache.clean.logprob         # log p(answer) per pair
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformers import Cache

from mathcircuits._errors import FixableValueError
from mathcircuits.circuit.components import Receiver, Sender
from mathcircuits.models import HookedModel, Readout, attn_pre_norm_name, capture, final_norm, hooks, soft_cap
from mathcircuits.models.families import BlockStructure, block_structure
from mathcircuits.patching.metrics import Metric

__all__ = [
    "EdgeBatch",
    "PairCache",
    "pair_cache",
]


@dataclass(frozen=True)
class PairCache:
    """One batch of equal-length pairs and its two cached runs (every position), shared by all receivers.

    ``tokens``/``cf_tokens`` end with the answer's tokens but the last when there are several; ``answer`` is
    the first answer token; ``clean_logit``/``clean_logp`` are per answer position.
    """

    tokens: Int[Tensor, "batch seq"]
    cf_tokens: Int[Tensor, "batch seq"]
    answer: Int[Tensor, " batch"]
    ref: dict[str, Tensor]
    cf: dict[str, Tensor]
    clean: Readout
    structure: BlockStructure
    answers: Int[Tensor, "batch n_answer"] | None = None
    clean_logit: Float[Tensor, "batch n_answer"] | None = None
    clean_logp: Float[Tensor, "batch n_answer"] | None = None
    prefix_kv: dict[int, Cache] = field(default_factory=dict, compare=False, repr=False)

    def kv(self, model: HookedModel, start: int) -> Any:
        """The clean run's KV cache of the first ``start`` positions (computed once per batch and length)."""
        if start not in self.prefix_kv:
            _, self.prefix_kv[start] = model.bridge(self.tokens[:, :start], return_type="logits_and_cache")
        return self.prefix_kv[start]

    @property
    def all_answers(self) -> Int[Tensor, "batch n_answer"]:
        """The answer's tokens (its first token alone when the cache was built without them)."""
        return self.answer[:, None] if self.answers is None else self.answers

    @property
    def readout_positions(self) -> list[int]:
        """The positions whose logits predict the answer's tokens (the last ``n_answer`` positions)."""
        seq, n = self.tokens.shape[1], self.all_answers.shape[1]
        return list(range(seq - n, seq))


def unembed(model: HookedModel, structure: BlockStructure, resid: Float[Tensor, "... d_model"]) -> Tensor:
    """Logits from final residual vectors: final norm, unembedding, soft cap (as the model computes them)."""
    return soft_cap(model.bridge.unembed(final_norm(model, structure, resid)), structure)


def position_scores(
    logits: Float[Tensor, "rows n vocab"], answers: Int[Tensor, "rows n"]
) -> tuple[Float[Tensor, "rows n"], Float[Tensor, "rows n"]]:
    """The answer token's raw logit and log-probability at each readout position."""
    logit = logits.gather(-1, answers[..., None])[..., 0]
    logp = torch.log_softmax(logits.float(), -1).gather(-1, answers[..., None])[..., 0]
    return logit, logp


def readout_of(logit: Tensor, logp: Tensor, metric: Metric | None) -> Readout:
    """A :class:`Readout` from per-position scores ``[rows, n_answer]`` (first token: logit, probability)."""
    if metric is not None and not metric.needs_probs:
        return Readout(logit[:, 0])
    return Readout(logit[:, 0], logp[:, 0].exp(), logp.sum(-1))


@dataclass(frozen=True)
class EdgeBatch:
    """Per-pair effects of each sender on one receiver, for one batch of equal-length pairs."""

    effects: Float[Tensor, "batch sender"]
    clean_logit: Float[Tensor, " batch"]


def receiver_slice(receiver: Receiver, act: Tensor) -> Tensor:
    """The receiver's slice of its hook's activation ``[..., pos, (head|group), d]``."""
    return act if receiver.kind == "mlp" else act[..., receiver.index, :]


def put_receiver(receiver: Receiver, act: Tensor, value: Tensor, pos: Sequence[int]) -> Tensor:
    """A copy of the receiver's hook activation with its slice replaced by ``value`` at positions ``pos``."""
    act = act.clone()
    value = value.to(act.device, act.dtype)  # where the receiver's block computes
    if receiver.kind == "mlp":
        act[:, pos] = value
    else:
        act[:, pos, receiver.index] = value
    return act


def check_request(
    model: HookedModel, receiver: Receiver, senders: Sequence[Sender], structure: BlockStructure
) -> Receiver:
    """The receiver, checked against the model; refused when a sender cannot reach it."""
    receiver = receiver.check(model.spec)
    for s in senders:
        s.check(model.spec)
        if not receiver.is_downstream_of(s, structure.parallel):
            raise FixableValueError(
                f"sender {s.name} lies at or after receiver {receiver.name}, so its output cannot reach it. ",
                "use senders in earlier layers (upstream_senders(spec, receiver, parallel) lists them).",
            )
    return receiver


@torch.no_grad()
def pair_cache(
    model: HookedModel,
    tokens: Int[Tensor, "batch seq"],
    cf_tokens: Int[Tensor, "batch seq"],
    answer: Int[Tensor, " batch"],
    need_probs: bool = False,
    answers: Int[Tensor, "batch n_answer"] | None = None,
) -> PairCache:
    """The reference and counterfactual runs of one batch, cached at every position.

    ``need_probs``: also the clean answer probability (``prob_change``). ``answers``: teacher forcing (every
    answer position read out); None: the first token at the last position only.
    """
    if tokens.shape != cf_tokens.shape:
        raise FixableValueError(
            f"reference tokens {tuple(tokens.shape)} and counterfactual tokens {tuple(cf_tokens.shape)} differ in "
            "shape. ",
            "pass token-aligned pairs of equal length (mathcircuits.data.generate_pairs).",
        )
    if answers is not None:
        if answers.dim() != 2 or answers.shape[0] != tokens.shape[0] or not bool((answers[:, 0] == answer).all()):
            raise FixableValueError(
                f"answers {tuple(answers.shape)} must be [batch, n_answer] and start with `answer`. ",
                "pass the pairs' answer_tokens (equal length within the batch).",
            )
        tokens = torch.cat([tokens, answers[:, :-1]], 1)
        cf_tokens = torch.cat([cf_tokens, answers[:, :-1]], 1)
    structure = block_structure(model)
    L = model.spec.n_layers
    names = [hooks.resid_post(L - 1)]
    for layer in range(L):
        names += [hooks.z(layer), hooks.mlp_out(layer), hooks.resid_pre(layer), hooks.sub(layer, structure.mlp_reads)]
        names += [hooks.sub(layer, f"attn.hook_{k}") for k in "qkv"] + [hooks.mlp_in(layer)]
        pre = attn_pre_norm_name(structure, layer)
        names += [pre] if pre is not None else []
    logits, ref = capture(model.bridge, tokens, sorted(set(names)), position=None)
    cf_names = [n for layer in range(L) for n in (hooks.z(layer), hooks.mlp_out(layer))]
    _, cf = capture(model.bridge, cf_tokens, cf_names, position=None)
    every = answer[:, None] if answers is None else answers
    logit, logp = position_scores(logits[:, -every.shape[1] :], every)
    clean = readout_of(logit, logp, None) if need_probs or answers is not None else Readout(logit[:, 0])
    return PairCache(tokens, cf_tokens, answer, ref, cf, clean, structure, answers, logit, logp)
