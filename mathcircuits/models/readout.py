"""The answer readout: final norm → unembedding → logit soft cap, read off the family table.

Background. Every method that asks "what does the model now say about the answer?"
turns a residual vector after the last block into logits the way the model does:

    logits = cap(W_U · N_f(x) + b_U),        cap(y) = c · tanh(y / c)  (Gemma 2/3; identity elsewhere)

with ``N_f`` the final norm. Which module is ``N_f`` and whether there is a soft cap ``c``
are per-family facts in :data:`~mathcircuits.models.families.FAMILIES`; this module reads
them from the model's :class:`~mathcircuits.models.families.BlockStructure`, so no caller
names ``ln_final`` or copies the cap.

A :class:`Readout` is the value read out at the patched position: the correct answer's raw
logit and, when a metric needs it, its probability, one value per row.

Usage::

    structure = block_structure(model)
    r = readout(model, structure, resid_final, answer, need_probs=False)     # from residuals
    r = Readout.from_logits(logits, answer, need_probs=True)                 # from the model's logits
    lens = vocab_logits(model, structure, resid_post_of_every_layer)          # the logit lens
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mathcircuits.models.families import BlockStructure
from mathcircuits.models.loading import HookedModel

__all__ = ["Readout", "Target", "final_norm", "readout", "soft_cap", "token_scores", "vocab_logits"]


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
        """The readout of full logits (soft cap already applied by the model).

        Args:
            logits: the model's logits at the read position, one row per readout.
            answer: the answer token of each row.
            need_probs: also compute the probability (a softmax over the whole vocabulary, in float32).

        Returns:
            The readout of each row.
        """
        logit = logits.gather(-1, answer[:, None])[:, 0]
        prob = torch.softmax(logits.float(), -1).gather(-1, answer[:, None])[:, 0] if need_probs else None
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
                raise ValueError("this readout has no probabilities. Fix: read out with need_probs=True.")
            return self.prob
        if self.logprob is None:
            raise ValueError(
                "this readout has no answer log-probability: it was read at the last prompt position only. "
                "Fix: read the logits at every answer position (mathcircuits.patching.answer_readout), or use a "
                "last-position metric (relative_logit, logit_diff, prob_change)."
            )
        return self.logprob


def soft_cap(logits: Tensor, structure: BlockStructure) -> Tensor:
    """The family's logit soft cap ``c · tanh(logits / c)``; the logits unchanged when it has none."""
    cap = structure.logit_softcap
    return logits if cap is None else cap * torch.tanh(logits / cap)


def final_norm(model: HookedModel, structure: BlockStructure, resid: Float[Tensor, "*rows d_model"]) -> Tensor:
    """The final norm (the family's ``final_norm`` module of the bridge) applied to residual vectors.

    Args:
        model: the hooked model.
        structure: its block structure.
        resid: residual vectors (any leading shape).

    Returns:
        ``N_f(resid)``, the same shape.
    """
    return getattr(model.bridge, structure.final_norm)(resid)


def vocab_logits(
    model: HookedModel, structure: BlockStructure, resid: Float[Tensor, "*rows d_model"]
) -> Float[Tensor, "*rows vocab"]:
    """Logits over the whole vocabulary from residual vectors: final norm, unembedding, soft cap.

    On the last block's output this is the model's own logits; on an earlier layer's residual it is
    the logit lens. The unembedding is applied in the residual's dtype (float32 activations of a bf16
    model are read out in float32).

    Args:
        model: the hooked model.
        structure: its block structure.
        resid: residual vectors (any leading shape).

    Returns:
        The logits.
    """
    normed = final_norm(model, structure, resid)
    bridge = model.bridge
    logits = normed @ bridge.W_U.to(normed.dtype)
    b_u = getattr(bridge, "b_U", None)
    if b_u is not None and torch.is_tensor(b_u):
        logits = logits + b_u.to(normed.dtype)
    return soft_cap(logits, structure)


def readout(
    model: HookedModel,
    structure: BlockStructure,
    resid: Float[Tensor, "rows d_model"],
    answer: Int[Tensor, " rows"],
    need_probs: bool,
) -> Readout:
    """The answer's logit (and probability) from final residual vectors: final norm, unembedding, soft cap.

    Without probabilities only the answer's column of the unembedding is computed.

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
    normed = final_norm(model, structure, resid)
    if need_probs:
        logits = soft_cap(bridge.unembed(normed), structure)
        probs = torch.softmax(logits.float(), -1)
        return Readout(logits.gather(-1, answer[:, None])[:, 0], probs.gather(-1, answer[:, None])[:, 0])
    out = (normed * bridge.W_U[:, answer].T).sum(-1)  # only the answer's column of the unembedding
    b_u = getattr(bridge, "b_U", None)
    if b_u is not None and torch.is_tensor(b_u):
        out = out + b_u[answer]
    return Readout(soft_cap(out, structure))


def token_scores(
    model: HookedModel,
    structure: BlockStructure,
    resid: Float[Tensor, "rows d_model"],
    tokens: Int[Tensor, " rows"],
    chunk_rows: int = 512,
) -> tuple[Float[Tensor, " rows"], Float[Tensor, " rows"]]:
    """Each row's token's raw logit and log-probability from final residual vectors (in chunks of rows).

    The log-probability needs the whole vocabulary's logits (its log-sum-exp), so this costs one
    unembedding per row; ``chunk_rows`` bounds the memory (``chunk_rows × vocab`` floats at a time).

    Args:
        model: the hooked model.
        structure: its block structure.
        resid: the residual stream after the last block, one row per readout.
        tokens: the token scored in each row.
        chunk_rows: rows per unembedding call.

    Returns:
        ``(logit, logp)``, one value per row each (``logp`` in float32).
    """
    logit, logp = [], []
    for lo in range(0, resid.shape[0], max(1, chunk_rows)):
        logits = vocab_logits(model, structure, resid[lo : lo + chunk_rows])
        tok = logits.gather(-1, tokens[lo : lo + chunk_rows, None])[:, 0]
        logit.append(tok)
        logp.append(tok.float() - torch.logsumexp(logits.float(), -1))  # log-softmax of one column, one pass
    if not logit:
        empty = resid.new_zeros(0)
        return empty, empty.float()
    return torch.cat(logit), torch.cat(logp)
