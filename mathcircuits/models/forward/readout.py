"""The answer readout: final norm → unembedding → logit soft cap, read off the family table.

Every method that asks "what does the model now say about the answer?" turns a residual vector after the last
block into logits the way the model does:

    logits = cap(W_U · N_f(x) + b_U),        cap(y) = c · tanh(y / c)  (Gemma 2/3; identity elsewhere)

Which module is the final norm ``N_f`` and whether there is a soft cap ``c`` are per-family facts
(:data:`~mathcircuits.models.families.FAMILIES`), read from the model's
:class:`~mathcircuits.models.families.BlockStructure`, so no caller names ``ln_final`` or copies the cap.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, TypeAlias

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.models.families import BlockStructure
from mathcircuits.models.forward.placement import execution_device, output_device, unembed_columns
from mathcircuits.models.hooked import HookedModel

__all__ = [
    "Readout",
]

#: The most vocabulary columns per matrix product when a readout needs the whole vocabulary (the probability's
#: normaliser); fewer with many rows, so that one chunk of float32 logits stays within :data:`CHUNK_ELEMENTS`.
VOCAB_CHUNK = 32768
#: Float32 logits one vocabulary chunk may hold (2**28: 1 GiB), whatever the number of rows.
CHUNK_ELEMENTS = 1 << 28
#: On a CPU the normaliser works in tiles of this many rows × columns (8 MiB of float32 logits), so each tile's
#: log-sum-exp reads logits still in cache instead of a freshly allocated GiB; a GPU takes a whole chunk at once.
CPU_TILE = (512, 4096)


def vocab_chunk_for(rows: int, vocab_chunk: int | None = None) -> int:
    """Vocabulary columns per chunk for ``rows`` readout rows: ``vocab_chunk`` if given, else the most (at most
    :data:`VOCAB_CHUNK`, at least 256) that keep ``rows × columns`` within :data:`CHUNK_ELEMENTS`.
    """
    if vocab_chunk is not None:
        return vocab_chunk
    return max(256, min(VOCAB_CHUNK, CHUNK_ELEMENTS // max(rows, 1)))


#: What a metric reads off a :class:`Readout`: the first answer token's logit or probability, or the whole
#: answer's log-probability.
Target: TypeAlias = Literal["logit", "prob", "logprob"]


@dataclass(frozen=True)
class Readout:
    """The answer's first-token logit and, when asked for, its probability and the whole answer's log-probability.

    ``logprob`` is ``Σ_j log p(answer_j | prompt, answer_<j)`` (teacher-forced), one value per row.
    """

    logit: Float[Tensor, " rows"]
    prob: Float[Tensor, " rows"] | None = None
    logprob: Float[Tensor, " rows"] | None = None

    @classmethod
    def from_logits(
        cls, logits: Float[Tensor, "rows vocab"], answer: Int[Tensor, " rows"], need_probs: bool
    ) -> Readout:
        """The readout of full logits (soft cap already applied); ``need_probs`` adds a float32 softmax."""
        index = answer[:, None].to(logits.device)
        logit = logits.gather(-1, index)[:, 0].float()
        prob = torch.softmax(logits.float(), -1).gather(-1, index)[:, 0] if need_probs else None
        return cls(logit, prob)

    def take(self, rows: Int[Tensor, " n"]) -> Readout:
        """The readout of the given rows (e.g. the pair each patched row belongs to)."""
        pick = lambda t: None if t is None else t[rows]  # noqa: E731
        return Readout(self.logit[rows], pick(self.prob), pick(self.logprob))

    def value(self, target: Target) -> Float[Tensor, " rows"]:
        """The logit, the probability or the answer's log-probability; a clear error when it was not read out."""
        if target == "logit":
            return self.logit
        if target == "prob":
            if self.prob is None:
                raise FixableValueError("this readout has no probabilities. ", "read out with need_probs=True.")
            return self.prob
        if self.logprob is None:
            raise FixableValueError(
                "this readout has no answer log-probability: it was read at the last prompt position only. ",
                "read the logits at every answer position (mathcircuits.patching.metrics.answer_readout), or use a "
                "last-position metric (relative_logit, logit_diff, prob_change).",
            )
        return self.logprob


def soft_cap(logits: Tensor, structure: BlockStructure) -> Tensor:
    """The family's logit soft cap ``c · tanh(logits / c)``; the logits unchanged when it has none."""
    cap = structure.logit_softcap
    return logits if cap is None else cap * torch.tanh(logits / cap)


def final_norm(model: HookedModel, structure: BlockStructure, resid: Float[Tensor, "*rows d_model"]) -> Tensor:
    """The family's final norm module of the bridge applied to residual vectors (any leading shape)."""
    norm = getattr(model.bridge, structure.final_norm)
    return norm(resid.to(execution_device(norm)))


def vocab_logits(
    model: HookedModel, structure: BlockStructure, resid: Float[Tensor, "*rows d_model"]
) -> Float[Tensor, "*rows vocab"]:
    """Logits over the whole vocabulary from residual vectors: final norm, unembedding, soft cap.

    On the last block's output this is the model's own logits; on an earlier layer's residual it is the logit lens.
    The unembedding is applied in the residual's dtype (float32 activations of a bf16 model are read out in float32),
    on the unembedding's device (offloaded weights loaded for the call).
    """
    normed = final_norm(model, structure, resid.to(output_device(model)))
    w_u, b_u = unembed_columns(model, slice(None))
    logits = normed @ w_u.to(normed.dtype)
    if b_u is not None:
        logits = logits + b_u.to(normed.dtype)
    return soft_cap(logits, structure)


@contextmanager
def exact_tf32(dtype: torch.dtype) -> Iterator[None]:
    """Within the block, float32 matrix products on CUDA may use TF32 when the values came from ``dtype``.

    A bf16 or fp16 value is exact in TF32 (an 8-bit exponent and a 10-bit mantissa hold bf16's 7 and fp16's 10
    mantissa bits and both ranges), so a bf16 model's readout products are exact in TF32 and accumulate in float32:
    the same readout, about 8× faster on an H100. Float32 values would be rounded: for them nothing changes.
    """
    matmul = torch.backends.cuda.matmul
    if dtype not in (torch.bfloat16, torch.float16) or not hasattr(matmul, "fp32_precision"):
        yield
        return
    before = matmul.fp32_precision
    matmul.fp32_precision = "tf32"
    try:
        yield
    finally:
        matmul.fp32_precision = before


def _logsumexp(logits: Float[Tensor, "rows columns"]) -> Float[Tensor, " rows"]:
    """``torch.logsumexp`` over the last axis, in place on ``logits`` (a scratch tile) unless it needs a gradient."""
    if logits.requires_grad:
        return torch.logsumexp(logits, -1)
    top = logits.amax(-1, keepdim=True)
    top = top.masked_fill(top.isinf(), 0.0)  # as torch.logsumexp: rows of infinities keep them
    return logits.sub_(top).exp_().sum(-1).log_().add_(top[:, 0])


def log_normalizer(
    model: HookedModel,
    structure: BlockStructure,
    normed: Float[Tensor, "rows d_model"],
    vocab_chunk: int | None = None,
) -> Float[Tensor, " rows"]:
    """``log Σ_v exp(logit_v)`` of each row, in float32, from the final-normed residual, chunked over the vocabulary.

    Only ``rows × vocab_chunk`` logits exist at a time (the whole matrix would be 43 GB for 83,200 rows of a 128k
    vocabulary; by default a chunk holds at most 2**28, 1 GiB); the running log-sum-exp is exact up to float32
    rounding. ``normed`` is on the unembedding's device.
    """
    vocab = int(model.spec.vocab_size)
    x = normed.float()
    rows = x.shape[0]
    vocab_chunk = vocab_chunk_for(rows, vocab_chunk)
    tile_rows, tile_cols = CPU_TILE if x.device.type == "cpu" else (max(rows, 1), vocab_chunk)
    total = torch.full((rows,), float("-inf"), device=x.device)
    for lo in range(0, vocab, vocab_chunk):
        w_u, b_u = unembed_columns(model, slice(lo, min(lo + vocab_chunk, vocab)))
        w, b = w_u.float(), None if b_u is None else b_u.float()
        parts = []  # each row tile's running value (no in-place writes: attribution differentiates this)
        with exact_tf32(torch.promote_types(normed.dtype, w_u.dtype)):
            for r in range(0, rows, tile_rows):
                part = total[r : r + tile_rows]
                for c in range(0, w.shape[1], tile_cols):
                    logits = x[r : r + tile_rows] @ w[:, c : c + tile_cols]
                    if b is not None:
                        logits = logits + b[c : c + tile_cols]
                    part = torch.logaddexp(part, _logsumexp(soft_cap(logits, structure)))
                parts.append(part)
        total = torch.cat(parts) if parts else total
    return total


def token_scores(
    model: HookedModel,
    structure: BlockStructure,
    resid: Float[Tensor, "rows d_model"],
    tokens: Int[Tensor, " rows"],
    need_logp: bool = True,
    vocab_chunk: int | None = None,
) -> tuple[Float[Tensor, " rows"], Float[Tensor, " rows"] | None]:
    """Each row's token's raw logit and log-probability from final residual vectors: the one readout of every scan.

    The final norm runs in the model's dtype; the unembedding and everything after it in float32, so a bf16 model's
    readout is not rounded to bf16 steps (0.125 at a logit of 20). Only the columns of the tokens that occur are
    read; the normaliser is accumulated over vocabulary chunks. Clean and patched values of every method come from
    this one function, so no offset between two code paths enters an effect. Results are on the unembedding's device.
    """
    dev = output_device(model)
    normed = final_norm(model, structure, resid.to(dev))
    distinct, which = torch.unique(tokens.to(dev), return_inverse=True)
    w_u, b_u = unembed_columns(model, distinct)  # [d_model, distinct tokens]
    with exact_tf32(torch.promote_types(normed.dtype, w_u.dtype)):
        per_token = normed.float() @ w_u.float()
    if b_u is not None:
        per_token = per_token + b_u.float()
    logit = soft_cap(per_token.gather(-1, which[:, None])[:, 0], structure)
    if not need_logp:
        return logit, None
    return logit, logit - log_normalizer(model, structure, normed, vocab_chunk)


def readout(
    model: HookedModel,
    structure: BlockStructure,
    resid: Float[Tensor, "rows d_model"],
    answer: Int[Tensor, " rows"],
    need_probs: bool,
    vocab_chunk: int | None = None,
) -> Readout:
    """The answer's logit (and probability) from final residual vectors, read by :func:`token_scores` (float32)."""
    logit, logp = token_scores(model, structure, resid, answer, need_probs, vocab_chunk)
    return Readout(logit) if logp is None else Readout(logit, logp.exp())
