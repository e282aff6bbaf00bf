"""The two forward passes of exact path patching: reference and counterfactual activations at the last position.

The shared few-shot prefix runs once for both prompt sets (exact). With ``answers`` (teacher forcing)
rows are (pair, position), ``row = pair · positions + j``: with every other head frozen, a sender's
change stays at its position, so each row is its own last-position chain.

Usage::

    cache = last_position_caches(model, batch.tokens, batch.cf_tokens)
    clean = cache.clean(batch.answer, need_probs=False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.models import PrefixCaches, Readout, attn_pre_norm_name, capture, hooks
from mathcircuits.models.families import BlockStructure, block_structure
from mathcircuits.patching.metrics import answer_readout

if TYPE_CHECKING:
    from mathcircuits.models import HookedModel

__all__: list[str] = []


@dataclass(frozen=True)
class LastPositionCache:
    """Reference and counterfactual activations at the patched position, keyed by hook name.

    ``ref`` holds, per layer, ``hook_z``, ``hook_mlp_out``, the residual the MLP reads and (with
    post-attention norms) the attention output before that norm, plus the last ``hook_resid_post``;
    ``cf`` holds ``hook_z``, ``hook_mlp_out`` and the last ``hook_resid_post``. With ``positions`` > 1
    every row is a (pair, position): ``pair · positions + j``.
    """

    logits: Float[Tensor, "rows vocab"]
    ref: dict[str, Tensor]
    cf: dict[str, Tensor]
    structure: BlockStructure
    cf_logits: Float[Tensor, "rows vocab"] | None = None
    positions: int = 1

    def clean(self, answer: Int[Tensor, " batch"], need_probs: bool) -> Readout:
        """The unpatched readout of each pair at the last position (soft cap already applied by the model)."""
        return Readout.from_logits(self.logits, answer, need_probs)

    def clean_answers(self, answers: Int[Tensor, "batch n_answer"]) -> Readout:
        """The unpatched readout of each pair over every answer token (first-token logit, whole-answer log-prob)."""
        return answer_readout(self.logits.reshape(answers.shape[0], self.positions, -1), answers)

    def counterfactual(self, answers: Int[Tensor, "batch n_answer"]) -> Readout:
        """The counterfactual prompt's readout of the *clean* answer: the total effect's patched side."""
        if self.cf_logits is None:
            raise FixableValueError("this cache kept no counterfactual logits. ", "build it with last_position_caches.")
        return answer_readout(self.cf_logits.reshape(answers.shape[0], self.positions, -1), answers)


def last_position_caches(
    model: HookedModel,
    tokens: Int[Tensor, "batch seq"],
    cf_tokens: Int[Tensor, "batch seq"],
    position: int = -1,
    structure: BlockStructure | None = None,
    share_prefix: bool = True,
    answers: Int[Tensor, "batch n_answer"] | None = None,
    prefixes: PrefixCaches | None = None,
) -> LastPositionCache:
    """The two forward passes of the method: reference and counterfactual activations at ``position``.

    ``cf_tokens`` are token-aligned with ``tokens``. ``share_prefix=False`` runs one plain forward of both sides
    (for checking). ``answers``: teacher forcing (module docstring; ``position`` must be -1); None: the last
    prompt position only. ``prefixes``: prefix KV caches kept across calls (a template's batches share one).
    """
    structure = structure or block_structure(model)
    last = None
    if answers is not None:
        if position != -1 or answers.dim() != 2 or answers.shape[0] != tokens.shape[0] or answers.shape[1] < 1:
            raise FixableValueError(
                f"answers {tuple(answers.shape)} for {tokens.shape[0]} prompts at position {position}: teacher forcing "
                "needs [batch, n_answer] answer tokens and the last position. ",
                "pass the batch's answer_tokens.",
            )
        tokens = torch.cat([tokens, answers[:, :-1]], 1)
        cf_tokens = torch.cat([cf_tokens, answers[:, :-1]], 1)
        last = answers.shape[1]
    n_layers = model.spec.n_layers
    names = [hooks.resid_post(n_layers - 1)]
    for layer in range(n_layers):
        names += [hooks.z(layer), hooks.mlp_out(layer), hooks.sub(layer, structure.mlp_reads)]
        pre = attn_pre_norm_name(structure, layer)
        if pre is not None:
            names.append(pre)
    # reference and counterfactual prompts differ only in the query: one clean prefix cache serves both, and both
    # run as one batch (rows never interact; a small batch's forward costs about as much as reading the weights)
    caches: PrefixCaches | None = None
    if share_prefix and position == -1:
        caches = {} if prefixes is None else prefixes
    B = tokens.shape[0]
    both, acts = capture(model.bridge, torch.cat([tokens, cf_tokens]), names, position, caches, last=last)
    logits, cf_logits = both[:B], both[B:]
    ref = {k: v[:B] for k, v in acts.items()}
    cf_names = [n for layer in range(n_layers) for n in (hooks.z(layer), hooks.mlp_out(layer))]
    cf_names.append(hooks.resid_post(n_layers - 1))  # the counterfactual's own answer (the total effect)
    cf = {k: acts[k][B:] for k in cf_names}
    if last is None:
        return LastPositionCache(logits=logits, ref=ref, cf=cf, structure=structure, cf_logits=cf_logits)
    rows = lambda t: t.reshape(t.shape[0] * last, *t.shape[2:])  # noqa: E731  (pair, position) → row
    return LastPositionCache(
        logits=rows(logits),
        ref={k: rows(v) for k, v in ref.items()},
        cf={k: rows(v) for k, v in cf.items()},
        structure=structure,
        cf_logits=rows(cf_logits),
        positions=last,
    )
