"""Greedy generation for math benchmarks: batched, left-padded, stopped at a stop string or a finished answer.

Decoding is greedy (as in LLM-Adapters). A row stops at EOS, at a stop string
(e.g. the model starting a new "Question:") or, optionally, right after its first
finished "The answer is N." sentence, the form every exemplar ends with; the text
is cut there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

from mathcircuits.evaluation.batching import left_pad, max_positions, model_device, pad_token_id

__all__ = ["DEFAULT_STOP", "generate_greedy"]

DEFAULT_STOP = ("\nQuestion:", "\n\nQ:", "### Instruction", "\n\n\n")
# A finished "The answer is N." sentence (the period or newline must be followed by
# whitespace, so "1." is not cut before "1.5").
_ANSWER_DONE = re.compile(r"answer is:?\s*\$?-?\d[\d,]*(?:\.\d+)?(?:/\d+)?[^\S\n]*[.\n]\s", re.IGNORECASE)


def _truncate(text: str, stop: Sequence[str], stop_at_answer: bool) -> str:
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    if stop_at_answer and (m := _ANSWER_DONE.search(text)):
        cuts.append(m.end())
    return text[: min(cuts, default=len(text))]


def _is_done(text: str, stop: Sequence[str], stop_at_answer: bool) -> bool:
    return any(s in text for s in stop) or (stop_at_answer and _ANSWER_DONE.search(text) is not None)


def _stop_criteria(tokenizer: Any, stop: Sequence[str], stop_at_answer: bool, prompt_len: int):

    class _StopStrings(StoppingCriteria):
        """Mark a row done once its decoded continuation holds a stop string or a finished answer."""

        def __call__(self, input_ids, scores=None, **kwargs):  # HF passes scores=None here
            texts = tokenizer.batch_decode(input_ids[:, prompt_len:], skip_special_tokens=True)
            return torch.tensor([_is_done(t, stop, stop_at_answer) for t in texts], device=input_ids.device)

    return StoppingCriteriaList([_StopStrings()]) if (stop or stop_at_answer) else None


def generate_greedy(
    model: torch.nn.Module,
    tokenizer: Any,
    prompts: Sequence[str],
    max_new_tokens: int = 256,
    batch_size: int = 8,
    stop: Sequence[str] = DEFAULT_STOP,
    stop_at_answer: bool = False,
    add_special_tokens: bool = True,
    progress: bool = False,
    desc: str = "generate",
) -> list[str]:
    """Greedy continuations of ``prompts``, batched with left padding, cut at the first stop string.

    Args:
        model: an HF causal LM (or anything with ``generate``).
        tokenizer: its tokenizer.
        prompts: the prompt texts.
        max_new_tokens: at most this many generated tokens per prompt.
        batch_size: prompts per ``generate`` call (longest first, so memory fails fast).
        stop: stop strings; a row ends once its continuation holds one, and the text is cut there.
        stop_at_answer: also end a row after its first finished "The answer is N." sentence.
        add_special_tokens: False for prompts that already hold them (chat templates).
        progress: show a progress bar.
        desc: the progress bar's label.

    Returns:
        One stripped continuation per prompt, in the order of ``prompts``.

    Raises:
        ValueError: a prompt is empty, or too long for the model's context with ``max_new_tokens``.
    """

    if batch_size < 1 or max_new_tokens < 1:
        raise ValueError(f"batch_size={batch_size} and max_new_tokens={max_new_tokens} must both be >= 1.")
    encoded = [tokenizer(p, add_special_tokens=add_special_tokens)["input_ids"] for p in prompts]
    limit = max_positions(model)
    for i, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"prompt {i} is empty after tokenization; give every item a non-empty question.")
        if limit is not None and len(ids) + max_new_tokens > limit:
            raise ValueError(
                f"prompt {i} has {len(ids)} tokens; with max_new_tokens={max_new_tokens} it exceeds the model's "
                f"{limit} positions. Fix: fewer few-shot exemplars, a smaller max_new_tokens, or a shorter template."
            )
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    gen_cfg = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=pad_token_id(tokenizer),
        eos_token_id=eos if eos is not None else tokenizer.eos_token_id,
    )
    order = sorted(range(len(prompts)), key=lambda i: -len(encoded[i]))  # longest first: fail fast on memory
    outputs: list[str] = [""] * len(prompts)
    device = model_device(model)
    batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    with torch.inference_mode():
        for idx in tqdm(batches, desc=desc, disable=not progress, leave=False):
            ids, mask = left_pad([encoded[i] for i in idx], gen_cfg.pad_token_id, device)
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=gen_cfg,
                stopping_criteria=_stop_criteria(tokenizer, stop, stop_at_answer, ids.shape[1]),
            )
            texts = tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
            for i, t in zip(idx, texts):
                outputs[i] = _truncate(t, stop, stop_at_answer).strip()
    return outputs
