"""Keep the pairs the model answers correctly, and report its accuracy.

Following Zhang et al. (2024, §3.1) we analyse only prompts the model gets
right. A pair is correct when greedy decoding reproduces every token of the
answer (teacher-forced: one forward on prompt + answer, argmax at each answer
position), so the first-token criterion of single-token answers is a special
case. We also record the probability of the answer's first token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import torch
from tqdm.auto import tqdm

from mathcircuits._errors import FixableTypeError, FixableValueError
from mathcircuits.data.batching import length_groups, padded_groups
from mathcircuits.data.pairset import PairSet

__all__ = [
    "accuracy_table",
    "filter_correct",
    "score_pairs",
]


def check_tokenizer(model: Any, pairs: PairSet) -> None:
    """Refuse pairs made with another tokenizer than the model's (their token ids mean other text).

    Models without ``tokenizer`` are not checked by fingerprint; token ids must lie inside
    ``spec.vocab_size`` when the model has one.
    """
    pairs.require_model(model, "check_tokenizer", scored=False)


@torch.no_grad()
def score_pairs(
    model: Callable[[torch.Tensor], torch.Tensor],
    pairs: PairSet,
    batch_size: int = 32,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> PairSet:
    """Score the model on each pair: is every answer token the greedy prediction (teacher-forced)?

    ``model`` maps ``[batch, seq]`` tokens to logits (a HookedModel, or ``lambda t: hf(t).logits``). With
    ``logits_from(tokens, start)`` (:class:`~mathcircuits.models.PrefixRunner`, a HookedModel) only
    the logits from the first answer position on are computed, each batch's shared few-shot prefix once, batches
    grouped by ``template_id`` too. Rows of different lengths share a right-padded batch (:func:`padded_groups`)
    unless ``model`` carries ``fwd_hooks``. Adds or replaces ``correct`` (every answer token right),
    ``first_correct``, ``p_answer`` (first answer token) and ``logp_answer`` (teacher-forced log-probability of
    the whole answer).
    """

    needed = ("tokens", "answer_tokens", "n_tokens")
    if not isinstance(pairs, PairSet):
        raise FixableTypeError(
            f"score_pairs needs a PairSet, got a {type(pairs).__name__}. ",
            "pass the pairs built by mathcircuits.data.generate_pairs (or PairSet.from_rows(rows)).",
        )
    have = pairs.dataset.column_names
    missing = [c for c in needed if c not in have]
    if missing:
        raise FixableValueError(
            f"score_pairs got a pair set without the columns {missing} (it has {list(have)}). ",
            "pass pairs built by mathcircuits.data.generate_pairs, which records the prompt tokens, "
            "their count and the answer tokens.",
        )
    if len(pairs) == 0:
        raise FixableValueError(
            "score_pairs got an empty pair set (0 pairs). ", "generate pairs first, or check the filters."
        )
    pairs.require_model(model, "score_pairs", scored=False)
    if device is None:
        device = getattr(model, "device", None) or "cpu"
    seqs = [list(t) + list(ans[:-1]) for t, ans in zip(pairs.tokens, pairs.answer_tokens)]
    n_prompt = list(pairs.n_tokens)
    answers = [list(a) for a in pairs.answer_tokens]
    correct = [False] * len(seqs)
    first = [False] * len(seqs)
    p_ans = [0.0] * len(seqs)
    logp = [0.0] * len(seqs)
    fast = hasattr(model, "logits_from")
    keys = list(pairs.template_ids) if fast and "template_id" in have else None
    # right padding (token 0) is exact for a causal LM without a mask; a runner with hooks keeps equal
    # lengths, since a hook may address positions from the end (e.g. a last-position ablation)
    group = length_groups if getattr(model, "fwd_hooks", None) else padded_groups
    for batch in tqdm(group([len(s) for s in seqs], batch_size, keys), disable=not progress, desc="scoring"):
        width = max(len(seqs[i]) for i in batch)
        toks = torch.tensor([seqs[i] + [0] * (width - len(seqs[i])) for i in batch], device=device)
        offset = min(n_prompt[i] for i in batch) - 1 if fast else 0
        logits = model.logits_from(toks, offset) if fast else model(toks)
        logits = logits.logits if hasattr(logits, "logits") else logits
        for row, i in enumerate(batch):
            k = len(answers[i])
            start = n_prompt[i] - 1 - offset
            pred = logits[row, start : start + k].argmax(-1).tolist()
            correct[i] = pred == list(answers[i])
            first[i] = pred[0] == answers[i][0]
            lp = torch.log_softmax(logits[row, start : start + k].float(), -1)
            p_ans[i] = float(lp[0, answers[i][0]].exp())
            logp[i] = float(lp.gather(-1, torch.as_tensor(answers[i], device=lp.device)[:, None]).sum())
    data = pairs.dataset
    spec = getattr(model, "spec", None)
    scored_by = [spec.fingerprint() if hasattr(spec, "fingerprint") else ""] * len(seqs)  # which model chose them
    columns = (("correct", correct), ("first_correct", first), ("p_answer", p_ans), ("logp_answer", logp))
    for name, col in (*columns, ("scored_by", scored_by)):
        if name in data.column_names:
            data = data.remove_columns(name)
        data = data.add_column(name, col)
    return PairSet(data)


def filter_correct(pairs: PairSet) -> PairSet:
    """Keep the rows the model answered correctly.

    ``pairs`` must be scored by :func:`score_pairs`.
    """
    if not pairs.has("correct"):
        raise FixableValueError("filter_correct needs a 'correct' column. ", "run score_pairs(model, pairs) first.")
    return PairSet(pairs.dataset.filter(lambda r: r["correct"]))


def accuracy_table(pairs: PairSet, by: tuple[str, ...] = ("operation", "template_id")) -> Any:
    """Accuracy and mean correct-answer probability per group, plus an "(all)" row per operation.

    Columns: the group columns, ``n``, ``accuracy``, ``first_token_accuracy`` and ``mean_p_answer``.
    """

    if not pairs.has("correct"):
        raise FixableValueError("accuracy_table needs a scored pair set. ", "run score_pairs(model, pairs) first.")
    df = pairs.dataset.select_columns([*by, "correct", "first_correct", "p_answer"]).to_pandas()

    def summarize(keys: list[str]) -> Any:
        return (
            df.groupby(keys)
            .agg(
                n=("correct", "size"),
                accuracy=("correct", "mean"),
                first_token_accuracy=("first_correct", "mean"),
                mean_p_answer=("p_answer", "mean"),
            )
            .reset_index()
        )

    table = summarize(list(by))
    if "operation" in by and len(by) > 1:
        total = summarize(["operation"])
        for col in by:
            if col != "operation":
                total[col] = "(all)"
        table = pd.concat([table, total[table.columns]], ignore_index=True).sort_values(
            ["operation", *[c for c in by if c != "operation"]]
        )
    return table.reset_index(drop=True)
