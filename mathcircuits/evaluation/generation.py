"""Greedy generation for math benchmarks: batched, prefix-cached, stopped at a stop string or a finished answer.

Decoding is greedy (as in LLM-Adapters). A row stops at EOS, at a stop string (e.g. a new "Question:")
or, optionally, after its first finished "The answer is N." sentence; the text is cut there.

Prefix caching. The prompts of a benchmark share their few-shot exemplars, so their first ``P`` token ids;
we run those once and give each batch a copy of their KV cache:

    [prefix (cached)] [padding] [suffix_i]        attention mask 1 · 0 · 1

HF ``generate`` derives position ids from the attention mask (``cumsum(mask) - 1``), so each real token
keeps the position and the context it has in the plain left-padded batch. Logits equal the plain path's up
to float summation order and greedy texts are the same (``tests/test_generation_cache.py``): ≤ 1e-5 on tiny
models of every family; on the embedded model bit-identical for unpadded rows and, in padded batches,
within the plain path's own change between batch sizes (about 3e-5 on logits up to ~23). Only the prefill
is saved; with ~100 new tokens decoding dominates on a CPU. Exact only where
:func:`prefix_cache_supported`; otherwise each batch is left-padded and runs whole.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

from mathcircuits._errors import FixableValueError
from mathcircuits.evaluation.batching import (
    common_prefix_length,
    left_pad,
    max_positions,
    model_device,
    pad_token_id,
)
from mathcircuits.models import (
    MIN_PREFIX,
    compare,
    fast_paths_enabled,
    model_depth,
    model_dtype,
    probe_tokens,
    repeat_cache,
    verify_once,
)

__all__: list[str] = []

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


def prefix_cache_supported(model: torch.nn.Module, length: int) -> bool:
    """Whether middle-padded prefix caching reproduces the plain generation of ``model`` exactly.

    It does when the forward takes ``position_ids`` and no attention window (``sliding_window``,
    ``attention_chunk_size``) is shorter than ``length``, the longest sequence a batch reaches (prefix + padded
    suffix + new tokens): a window counts cache slots, and the padding would push prefix tokens out of it.
    """
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "is_encoder_decoder", False):
        return False
    if "position_ids" not in inspect.signature(model.forward).parameters:
        return False
    text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    for key in ("sliding_window", "attention_chunk_size"):
        window = getattr(text_cfg, key, None)
        if isinstance(window, int) and window < length:
            return False
    return True


def _greedy(
    model: torch.nn.Module,
    tokenizer: Any,
    encoded: list[list[int]],
    gen_cfg: GenerationConfig,
    batch_size: int,
    stop: Sequence[str],
    stop_at_answer: bool,
    prefix_cache: bool,
    keep_first_logits: bool = False,
    progress: bool = False,
    desc: str = "generate",
) -> tuple[list[str], list[Tensor]]:
    """The generation loop of :func:`generate_greedy`; also returns each prompt's first-step logits if asked."""
    n = len(encoded)
    order = sorted(range(n), key=lambda i: -len(encoded[i]))  # longest first: fail fast on memory
    outputs: list[str] = [""] * n
    first: list[Tensor] = [torch.empty(0, device="cpu")] * n
    device = model_device(model)
    pad = gen_cfg.pad_token_id
    batches = [order[s : s + batch_size] for s in range(0, n, batch_size)]
    p = common_prefix_length(encoded)
    longest = max(len(e) for e in encoded) + gen_cfg.max_new_tokens
    cached = prefix_cache and fast_paths_enabled() and p >= MIN_PREFIX and prefix_cache_supported(model, longest)
    if cached:
        verify_once(model, "generation prefix cache", lambda: check_generation_cache(model, tokenizer))
    with torch.inference_mode():
        if cached:
            prefix = torch.tensor([encoded[0][:p]], dtype=torch.long, device=device)
            one_row = model(input_ids=prefix, use_cache=True).past_key_values
        for idx in tqdm(batches, desc=desc, disable=not progress, leave=False):
            kwargs: dict[str, Any] = {}
            if cached:
                suffix, suffix_mask = left_pad([encoded[i][p:] for i in idx], pad, device)
                ids = torch.cat([prefix.expand(len(idx), -1), suffix], dim=1)
                mask = torch.cat([torch.ones_like(prefix).expand(len(idx), -1), suffix_mask], dim=1)
                kwargs["past_key_values"] = repeat_cache(one_row, len(idx))  # generate extends its copy
            else:
                ids, mask = left_pad([encoded[i] for i in idx], pad, device)
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=gen_cfg,
                stopping_criteria=_stop_criteria(tokenizer, stop, stop_at_answer, ids.shape[1]),
                return_dict_in_generate=True,
                output_logits=keep_first_logits,
                **kwargs,
            )
            texts = tokenizer.batch_decode(out.sequences[:, ids.shape[1] :], skip_special_tokens=True)
            for row, (i, t) in enumerate(zip(idx, texts)):
                outputs[i] = _truncate(t, stop, stop_at_answer).strip()
                if keep_first_logits:
                    first[i] = out.logits[0][row].float().cpu()
    return outputs, first


def first_step_logits(
    model: torch.nn.Module,
    tokenizer: Any,
    prompts: Sequence[str],
    batch_size: int = 8,
    prefix_cache: bool = True,
    add_special_tokens: bool = True,
) -> Float[Tensor, "prompt vocab"]:
    """The next-token logits of each prompt as :func:`generate_greedy` computes them (its first step).

    Compares the prefix-cached path with the plain one (``prefix_cache=False``); ``[len(prompts), vocab]``
    float32, in prompt order.
    """
    encoded = _encode(model, tokenizer, prompts, 1, add_special_tokens)
    gen_cfg = _generation_config(model, tokenizer, 1)
    _, first = _greedy(model, tokenizer, encoded, gen_cfg, batch_size, (), False, prefix_cache, keep_first_logits=True)
    return torch.stack(first)


def check_generation_cache(model: torch.nn.Module, tokenizer: Any) -> tuple[float, float]:
    """First-step logits with the prefix cache against the plain left-padded path, on probe prompts.

    The run-time check of :func:`generate_greedy` (:func:`~mathcircuits.models.verify_once`): three prompts that
    share 8 tokens and end at different lengths, so the cached path pads between prefix and suffix.
    Returns ``(largest difference, tolerance)``.
    """
    vocab = int(getattr(model.config, "vocab_size", 0) or len(tokenizer))
    toks = probe_tokens(vocab).tolist()
    encoded = [toks[0], toks[1][:-1], toks[2][:-2]]
    if not prefix_cache_supported(model, max(len(e) for e in encoded) + 1):
        return 0.0, 0.0
    gen_cfg = _generation_config(model, tokenizer, 1)
    _, fast = _greedy(model, tokenizer, encoded, gen_cfg, 3, (), False, True, keep_first_logits=True)
    _, plain = _greedy(model, tokenizer, encoded, gen_cfg, 3, (), False, False, keep_first_logits=True)
    return compare(torch.stack(fast), torch.stack(plain), model_dtype(model), model_depth(model))


def _encode(
    model: torch.nn.Module, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int, add_special_tokens: bool
) -> list[list[int]]:
    """Token ids per prompt, checked against the model's context length."""
    encoded = [list(tokenizer(p, add_special_tokens=add_special_tokens)["input_ids"]) for p in prompts]
    limit = max_positions(model)
    for i, ids in enumerate(encoded):
        if not ids:
            raise ValueError(f"prompt {i} is empty after tokenization; give every item a non-empty question.")
        if limit is not None and len(ids) + max_new_tokens > limit:
            raise FixableValueError(
                f"prompt {i} has {len(ids)} tokens; with max_new_tokens={max_new_tokens} it exceeds the model's "
                f"{limit} positions. ",
                "fewer few-shot exemplars, a smaller max_new_tokens, or a shorter template.",
            )
    return encoded


def _generation_config(model: torch.nn.Module, tokenizer: Any, max_new_tokens: int) -> GenerationConfig:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=pad_token_id(tokenizer),
        eos_token_id=eos if eos is not None else tokenizer.eos_token_id,
    )


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
    prefix_cache: bool = True,
) -> list[str]:
    """Greedy continuations of ``prompts``, batched, with the shared prompt prefix run once; cut at a stop string.

    Args:
        batch_size: prompts per ``generate`` call (longest first, so memory fails fast).
        stop_at_answer: also end a row after its first finished "The answer is N." sentence.
        add_special_tokens: False for prompts that already hold them (chat templates).
        prefix_cache: reuse the shared prefix's KV cache (same texts). False, a prefix under 4 tokens, or a
            model :func:`prefix_cache_supported` rejects: plain left-padded batches.

    Raises:
        ValueError: a prompt is empty, or too long for the model's context with ``max_new_tokens``.
    """

    if batch_size < 1 or max_new_tokens < 1:
        raise ValueError(f"batch_size={batch_size} and max_new_tokens={max_new_tokens} must both be >= 1.")
    if not prompts:
        return []
    encoded = _encode(model, tokenizer, prompts, max_new_tokens, add_special_tokens)
    gen_cfg = _generation_config(model, tokenizer, max_new_tokens)
    texts, _ = _greedy(
        model, tokenizer, encoded, gen_cfg, batch_size, stop, stop_at_answer, prefix_cache, progress=progress, desc=desc
    )
    return texts
