"""Score any HF causal LM on math (generation) and multiple-choice (log-likelihood) benchmarks.

Zhang et al. (ICML 2024, Sec. 5, Table 1) report accuracy on math word problems
and on generic benchmarks before and after fine-tuning. Two protocols:

* **math** — greedy decoding of a chain of thought from a zero- or few-shot prompt
  (exemplars from the train split, each ending "The answer is N."), then
  :func:`~mathcircuits.evaluation.extract.extract_number` and a 1e-3 tolerance,
  as in LLM-Adapters. Prompts are batched with left padding; decoding stops at
  EOS or at a stop string (e.g. the model starting a new "Question:").
* **choice** — for context ``c`` (the question in a template) and option ``o_i``,
  ``score_i = sum_t log p(o_i[t] | c, o_i[<t])``, optionally divided by the
  option's token or character count (lm-eval's ``acc_norm`` uses characters);
  the prediction is ``argmax_i score_i``. Option tokens are the tokens of
  ``c + " " + o_i`` after those of ``c`` (lm-eval's rule), batched with left
  padding and explicit position ids, keeping only the logits of the option positions.

Usage::

    model, tok = load_hf_model("embedded")
    score = evaluate_math(model, tok, load_benchmark("SVAMP", limit=50), style="chat")
    score.accuracy, score.to_dataframe()
"""

from __future__ import annotations

import inspect
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mathcircuits._io import SavedResult
from mathcircuits.evaluation.benchmarks import BenchmarkItem
from mathcircuits.evaluation.extract import answers_match, extract_number

__all__ = [
    "ALPACA_TEMPLATE",
    "CHOICE_TEMPLATE",
    "DEFAULT_STOP",
    "MATH_INSTRUCTION",
    "BenchmarkScore",
    "PromptStyle",
    "continuation_logprobs",
    "evaluate_choice",
    "evaluate_math",
    "generate_greedy",
    "math_prompt",
    "select_exemplars",
]

log = logging.getLogger(__name__)

PromptStyle = Literal["plain", "alpaca", "chat"]
Normalization = Literal["none", "tokens", "chars"]

ALPACA_TEMPLATE = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{question}\n\n### Response:\n"
)
MATH_INSTRUCTION = "Solve the problem step by step and end with 'The answer is <number>.'"
CHOICE_TEMPLATE = "Question: {question}\nAnswer:"
DEFAULT_STOP = ("\nQuestion:", "\n\nQ:", "### Instruction", "\n\n\n")
# A finished "The answer is N." sentence (the period or newline must be followed by
# whitespace, so "1." is not cut before "1.5").
_ANSWER_DONE = re.compile(r"answer is:?\s*\$?-?\d[\d,]*(?:\.\d+)?(?:/\d+)?[^\S\n]*[.\n]\s", re.IGNORECASE)


@dataclass(frozen=True)
class BenchmarkScore(SavedResult):
    """Per-item outcome of one benchmark run.

    ``predictions`` holds the generated text (math) or the chosen option (choice);
    ``extracted`` the number read from each generation (math, None if none);
    ``option_scores`` the per-option scores used for the choice (choice).
    """

    STAGE = "evaluate"

    benchmark: str
    kind: str
    uids: tuple[str, ...]
    golds: tuple[str, ...]
    predictions: tuple[str, ...]
    correct: tuple[bool, ...]
    extracted: tuple[float | None, ...] = ()
    option_scores: tuple[tuple[float, ...], ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.correct)

    @property
    def accuracy(self) -> float:
        return sum(self.correct) / self.n if self.n else float("nan")


    def to_dataframe(self):
        """One row per item: uid, gold, prediction, correct (and extracted number / option scores)."""
        import pandas as pd

        df = pd.DataFrame({"benchmark": self.benchmark, "uid": list(self.uids), "gold": list(self.golds),
                           "prediction": list(self.predictions), "correct": list(self.correct)})
        if self.extracted:
            df["extracted"] = list(self.extracted)
        if self.option_scores:
            df["option_scores"] = [list(s) for s in self.option_scores]
        return df


# --------------------------------------------------------------------------------------- prompts


def select_exemplars(train: Sequence[BenchmarkItem], k: int = 4, seed: int = 0) -> list[BenchmarkItem]:
    """``k`` few-shot exemplars from a train split, drawn with ``seed`` among items whose
    (model-written, noisy) rationale ends in the gold answer."""
    import random

    good = [it for it in train if it.rationale and answers_match(it.rationale, it.answer)]
    if len(good) < k:
        raise ValueError(
            f"only {len(good)} of {len(train)} train items have a rationale that reaches the gold answer, "
            f"fewer than the {k} exemplars asked for; lower n_shot or pass exemplars yourself."
        )
    return random.Random(seed).sample(good, k)


def _shot_answer(item: BenchmarkItem) -> str:
    text = item.rationale.strip() or f"The answer is {item.answer}."
    return text


def math_prompt(
    question: str,
    exemplars: Sequence[BenchmarkItem] = (),
    style: PromptStyle = "plain",
    tokenizer: Any = None,
    instruction: str | None = None,
) -> str:
    """The prompt text for one math question.

    ``plain``: ``"Question: ...\\nAnswer: <rationale>\\n\\n"`` per exemplar, then ``"Question: q\\nAnswer:"``;
    ``alpaca``: the LLM-Adapters template (exemplars as earlier instruction/response blocks);
    ``chat``: the tokenizer's chat template with exemplars as earlier turns and
    ``instruction`` (default :data:`MATH_INSTRUCTION`) appended to each user turn.
    """
    if style == "plain":
        shots = "".join(f"Question: {ex.question}\nAnswer: {_shot_answer(ex)}\n\n" for ex in exemplars)
        return f"{shots}Question: {question}\nAnswer:"
    if style == "alpaca":
        shots = "".join(ALPACA_TEMPLATE.format(question=ex.question) + _shot_answer(ex) + "\n\n" for ex in exemplars)
        return shots + ALPACA_TEMPLATE.format(question=question)
    if style == "chat":
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "style='chat' needs a tokenizer with a chat template (tokenizer.chat_template is empty or no "
                "tokenizer was given); pass the model's tokenizer, or use style='plain' for base models."
            )
        suffix = f"\n{instruction if instruction is not None else MATH_INSTRUCTION}".rstrip()
        messages: list[dict[str, str]] = []
        for ex in exemplars:
            messages += [{"role": "user", "content": ex.question + suffix},
                         {"role": "assistant", "content": _shot_answer(ex)}]
        messages.append({"role": "user", "content": question + suffix})
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    raise ValueError(f"unknown prompt style {style!r}; use 'plain', 'alpaca' or 'chat'.")


# ------------------------------------------------------------------------------------ generation


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _max_positions(model: torch.nn.Module) -> int | None:
    cfg = getattr(model, "config", None)
    return getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)


def _pad_id(tokenizer: Any) -> int:
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ValueError("the tokenizer has neither a pad nor an EOS token; set tokenizer.pad_token before scoring.")
    return int(pad)


def _left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            ids[i, width - len(s):] = torch.tensor(list(s), dtype=torch.long)
            mask[i, width - len(s):] = 1
    return ids.to(device), mask.to(device)


def _truncate(text: str, stop: Sequence[str], stop_at_answer: bool) -> str:
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    if stop_at_answer and (m := _ANSWER_DONE.search(text)):
        cuts.append(m.end())
    return text[: min(cuts, default=len(text))]


def _is_done(text: str, stop: Sequence[str], stop_at_answer: bool) -> bool:
    return any(s in text for s in stop) or (stop_at_answer and _ANSWER_DONE.search(text) is not None)


def _stop_criteria(tokenizer: Any, stop: Sequence[str], stop_at_answer: bool, prompt_len: int):
    from transformers import StoppingCriteria, StoppingCriteriaList

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
    """Greedy continuations of ``prompts`` (batched, left-padded), cut at the first stop string
    (and, with ``stop_at_answer``, after the first finished "The answer is N." sentence).

    Use ``add_special_tokens=False`` for prompts that already hold them (chat templates).
    """
    from tqdm.auto import tqdm
    from transformers import GenerationConfig

    if batch_size < 1 or max_new_tokens < 1:
        raise ValueError(f"batch_size={batch_size} and max_new_tokens={max_new_tokens} must both be >= 1.")
    encoded = [tokenizer(p, add_special_tokens=add_special_tokens)["input_ids"] for p in prompts]
    limit = _max_positions(model)
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
        pad_token_id=_pad_id(tokenizer),
        eos_token_id=eos if eos is not None else tokenizer.eos_token_id,
    )
    order = sorted(range(len(prompts)), key=lambda i: -len(encoded[i]))  # longest first: fail fast on memory
    outputs: list[str] = [""] * len(prompts)
    device = _device(model)
    batches = [order[s: s + batch_size] for s in range(0, len(order), batch_size)]
    with torch.inference_mode():
        for idx in tqdm(batches, desc=desc, disable=not progress, leave=False):
            ids, mask = _left_pad([encoded[i] for i in idx], gen_cfg.pad_token_id, device)
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=gen_cfg,
                stopping_criteria=_stop_criteria(tokenizer, stop, stop_at_answer, ids.shape[1]),
            )
            texts = tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)
            for i, t in zip(idx, texts):
                outputs[i] = _truncate(t, stop, stop_at_answer).strip()
    return outputs


def evaluate_math(
    model: torch.nn.Module,
    tokenizer: Any,
    items: Sequence[BenchmarkItem],
    exemplars: Sequence[BenchmarkItem] = (),
    style: PromptStyle = "plain",
    instruction: str | None = None,
    max_new_tokens: int = 256,
    batch_size: int = 8,
    stop: Sequence[str] = DEFAULT_STOP,
    stop_at_answer: bool = True,
    tol: float = 1e-3,
    progress: bool = True,
) -> BenchmarkScore:
    """Accuracy of greedy chain-of-thought answers on math items.

    Generation ends at EOS, at a ``stop`` string, or (``stop_at_answer``) once the
    model has written "The answer is N." — the form every exemplar ends with.

    Items whose question is one of the ``exemplars`` are left out (in the
    LLM-Adapters files every train record is also a test record).
    """
    if not items:
        raise ValueError("evaluate_math got no items; load a benchmark first (load_benchmark(name, limit=...)).")
    if any(it.kind != "math" for it in items):
        raise ValueError("evaluate_math got multiple-choice items; score those with evaluate_choice.")
    shot_questions = {ex.question for ex in exemplars}
    kept = [it for it in items if it.question not in shot_questions]
    if len(kept) < len(items):
        log.warning("left out %d item(s) that are also few-shot exemplars", len(items) - len(kept))
    if not kept:
        raise ValueError("every item is also a few-shot exemplar; draw exemplars from another split.")
    prompts = [math_prompt(it.question, exemplars, style, tokenizer, instruction) for it in kept]
    gens = generate_greedy(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size,
                           stop=stop, stop_at_answer=stop_at_answer, add_special_tokens=style != "chat",
                           progress=progress,
                           desc=f"{kept[0].benchmark} (math)")
    values = [extract_number(g) for g in gens]
    correct = [answers_match(v, it.answer, tol) for v, it in zip(values, kept)]
    settings = {"style": style, "n_shot": len(exemplars), "max_new_tokens": max_new_tokens, "tol": tol,
                "stop_at_answer": stop_at_answer,
                "n_left_out": len(items) - len(kept), "exemplar_uids": [ex.uid for ex in exemplars]}
    return BenchmarkScore(
        benchmark=kept[0].benchmark, kind="math", uids=tuple(it.uid for it in kept),
        golds=tuple(it.answer for it in kept), predictions=tuple(gens), correct=tuple(correct),
        extracted=tuple(values), settings=settings,
    )


# ------------------------------------------------------------------------------ log-likelihoods


def _split_tokens(tokenizer: Any, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Context and continuation token ids such that their concatenation tokenizes ``context + continuation``."""
    ctx = tokenizer(context)["input_ids"]
    whole = tokenizer(context + continuation)["input_ids"]
    if len(whole) > len(ctx) and whole[: len(ctx)] == ctx:
        return ctx, whole[len(ctx):]
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
    logits = logits[:, -(k + 1): -1].float()  # positions predicting the last k tokens
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
    """``(sum_t log p(continuation_t | context, continuation_<t), number of continuation tokens)`` per pair."""
    from tqdm.auto import tqdm

    if len(contexts) != len(continuations):
        raise ValueError(
            f"got {len(contexts)} contexts but {len(continuations)} continuations; pass one of each per pair."
        )
    pairs = [_split_tokens(tokenizer, c, o) for c, o in zip(contexts, continuations)]
    limit = _max_positions(model)
    for i, (ctx, cont) in enumerate(pairs):
        if not ctx or not cont:
            raise ValueError(
                f"pair {i}: {'context' if not ctx else 'continuation'} is empty after tokenization "
                f"({contexts[i][:60]!r} / {continuations[i][:60]!r}); every option needs a non-empty context and text."
            )
        if limit is not None and len(ctx) + len(cont) > limit:
            raise ValueError(f"pair {i} has {len(ctx) + len(cont)} tokens, more than the model's {limit} positions; "
                             "shorten the template or skip that item.")
    sums = torch.zeros(len(pairs))
    counts = torch.tensor([len(c) for _, c in pairs], dtype=torch.long)
    order = sorted(range(len(pairs)), key=lambda i: -(len(pairs[i][0]) + len(pairs[i][1])))
    batches = [order[s: s + batch_size] for s in range(0, len(order), batch_size)]
    pad = _pad_id(tokenizer)
    device = _device(model)
    with torch.inference_mode():
        for idx in tqdm(batches, desc=desc, disable=not progress, leave=False):
            ids, mask = _left_pad([pairs[i][0] + pairs[i][1] for i in idx], pad, device)
            sums[idx] = _batch_logprobs(model, ids, mask, counts[idx])
    return sums, counts


def evaluate_choice(
    model: torch.nn.Module,
    tokenizer: Any,
    items: Sequence[BenchmarkItem],
    template: str = CHOICE_TEMPLATE,
    normalization: Normalization = "none",
    batch_size: int = 16,
    progress: bool = True,
) -> BenchmarkScore:
    """Accuracy of picking the option with the highest (optionally length-normalised) log-likelihood.

    ``normalization``: ``"none"`` (summed log-probability), ``"tokens"`` (per option
    token) or ``"chars"`` (per character of the option, lm-eval's ``acc_norm``).
    """
    if not items:
        raise ValueError("evaluate_choice got no items; load a benchmark first (load_benchmark(name, limit=...)).")
    if any(it.kind != "choice" for it in items):
        raise ValueError("evaluate_choice got math items (no options); score those with evaluate_math.")
    if normalization not in ("none", "tokens", "chars"):
        raise ValueError(f"unknown normalization {normalization!r}; use 'none', 'tokens' or 'chars'.")
    if "{question}" not in template:
        raise ValueError(f"template {template!r} has no '{{question}}' field; add one, e.g. {CHOICE_TEMPLATE!r}.")
    contexts, conts, owner = [], [], []
    for n, it in enumerate(items):
        ctx = template.format(question=it.question)
        for opt in it.choices:
            contexts.append(ctx)
            conts.append(" " + opt)
            owner.append(n)
    sums, counts = continuation_logprobs(model, tokenizer, contexts, conts, batch_size, progress,
                                         desc=f"{items[0].benchmark} (choice)")
    if normalization == "tokens":
        scores = sums / counts
    elif normalization == "chars":
        scores = sums / torch.tensor([max(len(c), 1) for c in conts], dtype=torch.float)
    else:
        scores = sums
    per_item: list[list[float]] = [[] for _ in items]
    for n, s in zip(owner, scores.tolist()):
        per_item[n].append(s)
    chosen = [max(range(len(s)), key=s.__getitem__) for s in per_item]  # first option wins ties
    return BenchmarkScore(
        benchmark=items[0].benchmark, kind="choice", uids=tuple(it.uid for it in items),
        golds=tuple(it.answer for it in items), predictions=tuple(it.choices[c] for it, c in zip(items, chosen)),
        correct=tuple(c == it.gold_index for it, c in zip(items, chosen)),
        option_scores=tuple(tuple(s) for s in per_item),
        settings={"template": template, "normalization": normalization},
    )
