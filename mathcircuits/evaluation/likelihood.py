"""Log-likelihood of option texts after a context, for multiple-choice benchmarks.

For context ``c`` and option ``o``, ``score = sum_t log p(o[t] | c, o[<t])``.
Option tokens are the tokens of ``c + o`` after those of ``c`` (lm-eval's rule),
batched with left padding and explicit position ids, keeping only the logits of
the option positions.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm

from mathcircuits.evaluation.batching import left_pad, max_positions, model_device, pad_token_id

__all__ = ["continuation_logprobs"]


def _split_tokens(tokenizer: Any, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Context and continuation token ids such that their concatenation tokenizes ``context + continuation``."""
    ctx = tokenizer(context)["input_ids"]
    whole = tokenizer(context + continuation)["input_ids"]
    if len(whole) > len(ctx) and whole[: len(ctx)] == ctx:
        return ctx, whole[len(ctx) :]
    return ctx, tokenizer(continuation, add_special_tokens=False)["input_ids"]


def _accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _batch_logprobs(
    model: torch.nn.Module,
    ids: Int[Tensor, "batch seq"],
    mask: Int[Tensor, "batch seq"],
    cont_lens: Int[Tensor, " batch"],
) -> Float[Tensor, " batch"]:
    """Summed log-probabilities of the last ``cont_lens[b]`` tokens of each left-padded row."""
    k = int(cont_lens.max())
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    kwargs: dict[str, Any] = {"logits_to_keep": k + 1} if _accepts_logits_to_keep(model) else {}
    logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids, **kwargs).logits
    logits = logits[:, -(k + 1) : -1].float()  # positions predicting the last k tokens
    targets = ids[:, -k:]
    lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    keep = torch.arange(k, device=ids.device).unsqueeze(0) >= (k - cont_lens.to(ids.device)).unsqueeze(1)
    return (lp * keep).sum(-1).cpu()


def continuation_logprobs(
    model: torch.nn.Module,
    tokenizer: Any,
    contexts: Sequence[str],
    continuations: Sequence[str],
    batch_size: int = 16,
    progress: bool = False,
    desc: str = "log-likelihood",
) -> tuple[Float[Tensor, " n"], Int[Tensor, " n"]]:
    """Summed log-probability of each continuation after its context.

    ``score = sum_t log p(continuation[t] | context, continuation[<t])``, where the continuation's
    tokens are those of ``context + continuation`` after the context's (lm-eval's rule).

    Args:
        model: an HF causal LM.
        tokenizer: its tokenizer.
        contexts: one context per pair.
        continuations: one continuation per pair (e.g. ``" " + option``).
        batch_size: pairs per forward pass.
        progress: show a progress bar.
        desc: the progress bar's label.

    Returns:
        ``(sums, counts)``: the summed log-probabilities and the number of continuation tokens, per pair.

    Raises:
        ValueError: the lists differ in length, a context or continuation is empty after
            tokenization, or a pair is longer than the model's context.
    """

    if len(contexts) != len(continuations):
        raise ValueError(
            f"got {len(contexts)} contexts but {len(continuations)} continuations; pass one of each per pair."
        )
    pairs = [_split_tokens(tokenizer, c, o) for c, o in zip(contexts, continuations)]
    limit = max_positions(model)
    for i, (ctx, cont) in enumerate(pairs):
        if not ctx or not cont:
            raise ValueError(
                f"pair {i}: {'context' if not ctx else 'continuation'} is empty after tokenization "
                f"({contexts[i][:60]!r} / {continuations[i][:60]!r}); every option needs a non-empty context and text."
            )
        if limit is not None and len(ctx) + len(cont) > limit:
            raise ValueError(
                f"pair {i} has {len(ctx) + len(cont)} tokens, more than the model's {limit} positions; "
                "shorten the template or skip that item."
            )
    sums = torch.zeros(len(pairs))
    counts = torch.tensor([len(c) for _, c in pairs], dtype=torch.long)
    order = sorted(range(len(pairs)), key=lambda i: -(len(pairs[i][0]) + len(pairs[i][1])))
    batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    pad = pad_token_id(tokenizer)
    device = model_device(model)
    with torch.inference_mode():
        for idx in tqdm(batches, desc=desc, disable=not progress, leave=False):
            ids, mask = left_pad([pairs[i][0] + pairs[i][1] for i in idx], pad, device)
            sums[idx] = _batch_logprobs(model, ids, mask, counts[idx])
    return sums, counts
