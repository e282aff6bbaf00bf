"""Keep the pairs the model answers correctly, and report its accuracy.

Following Zhang et al. (2024, §3.1) we analyse only prompts the model gets
right. A pair is correct when greedy decoding reproduces every token of the
answer (teacher-forced: one forward on prompt + answer, argmax at each answer
position), so the first-token criterion of single-token answers is a special
case. We also record the probability of the answer's first token.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

import torch

__all__ = ["score_pairs", "filter_correct", "accuracy_table", "length_groups"]


def length_groups(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices grouped by equal length, split into batches (no padding needed)."""
    by_len: dict[int, list[int]] = defaultdict(list)
    for i, n in enumerate(lengths):
        by_len[n].append(i)
    out = []
    for n in sorted(by_len):
        idx = by_len[n]
        out.extend(idx[j : j + batch_size] for j in range(0, len(idx), batch_size))
    return out


@torch.no_grad()
def score_pairs(
    model: Callable[[torch.Tensor], torch.Tensor],
    dataset: Any,
    batch_size: int = 32,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> Any:
    """Add ``correct`` (bool), ``first_correct`` (bool) and ``p_answer`` (float) columns.

    Args:
        model: maps a [batch, seq] token tensor to logits (a HookedModel or HF-like callable).
        dataset: a ``datasets.Dataset`` with ``tokens``, ``answer_tokens`` and ``n_tokens`` (non-empty).
        batch_size: rows per forward.
        device: where the token tensors go.
        progress: show a progress bar.

    Returns:
        The dataset with the three columns added (replaced if present).
    """
    from tqdm.auto import tqdm

    needed = ("tokens", "answer_tokens", "n_tokens")
    have = getattr(dataset, "column_names", None)
    if have is None:
        raise TypeError(
            f"score_pairs needs a datasets.Dataset, got a {type(dataset).__name__}. "
            "Fix: pass the pairs built by mathcircuits.data.generate_pairs (or datasets.Dataset.from_list(rows))."
        )
    missing = [c for c in needed if c not in have]
    if missing:
        raise ValueError(
            f"score_pairs got a dataset without the columns {missing} (it has {list(have)}). "
            "Fix: pass pairs built by mathcircuits.data.generate_pairs, which records the prompt tokens, "
            "their count and the answer tokens."
        )
    if len(dataset) == 0:
        raise ValueError("score_pairs got an empty dataset (0 pairs). Fix: generate pairs first, or check the filters.")
    seqs = [list(t) + list(ans[:-1]) for t, ans in zip(dataset["tokens"], dataset["answer_tokens"])]
    n_prompt = list(dataset["n_tokens"])
    answers = list(dataset["answer_tokens"])
    correct = [False] * len(seqs)
    first = [False] * len(seqs)
    p_ans = [0.0] * len(seqs)
    for batch in tqdm(length_groups([len(s) for s in seqs], batch_size), disable=not progress, desc="scoring"):
        toks = torch.tensor([seqs[i] for i in batch], device=device)
        logits = model(toks)
        logits = logits.logits if hasattr(logits, "logits") else logits
        for row, i in enumerate(batch):
            k = len(answers[i])
            start = n_prompt[i] - 1
            pred = logits[row, start : start + k].argmax(-1).tolist()
            correct[i] = pred == list(answers[i])
            first[i] = pred[0] == answers[i][0]
            p_ans[i] = float(torch.softmax(logits[row, start].float(), -1)[answers[i][0]])
    for name, col in (("correct", correct), ("first_correct", first), ("p_answer", p_ans)):
        if name in dataset.column_names:
            dataset = dataset.remove_columns(name)
        dataset = dataset.add_column(name, col)
    return dataset


def filter_correct(dataset):
    """Keep the rows the model answered correctly (needs :func:`score_pairs` first)."""
    if "correct" not in dataset.column_names:
        raise ValueError("filter_correct needs a 'correct' column. Fix: run score_pairs(model, dataset) first.")
    return dataset.filter(lambda r: r["correct"])


def accuracy_table(dataset, by: tuple[str, ...] = ("operation", "template_id")) -> Any:
    """Accuracy and mean correct-answer probability per group, plus an 'all' row per operation."""
    import pandas as pd

    if "correct" not in dataset.column_names:
        raise ValueError("accuracy_table needs a scored dataset. Fix: run score_pairs(model, dataset) first.")
    df = dataset.select_columns([*by, "correct", "first_correct", "p_answer"]).to_pandas()
    table = df.groupby(list(by)).agg(n=("correct", "size"), accuracy=("correct", "mean"), first_token_accuracy=("first_correct", "mean"), mean_p_answer=("p_answer", "mean")).reset_index()
    if "operation" in by and len(by) > 1:
        total = df.groupby("operation").agg(n=("correct", "size"), accuracy=("correct", "mean"), first_token_accuracy=("first_correct", "mean"), mean_p_answer=("p_answer", "mean")).reset_index()
        for col in by:
            if col != "operation":
                total[col] = "(all)"
        table = pd.concat([table, total[table.columns]], ignore_index=True).sort_values(["operation", *[c for c in by if c != "operation"]])
    return table.reset_index(drop=True)
