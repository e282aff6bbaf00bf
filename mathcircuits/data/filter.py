"""Keep the pairs the model answers correctly, and report its accuracy.

Following Zhang et al. (2024, §3.1) we analyse only prompts the model gets
right. A pair is correct when greedy decoding reproduces every token of the
answer (teacher-forced: one forward on prompt + answer, argmax at each answer
position), so the first-token criterion of single-token answers is a special
case. We also record the probability of the answer's first token.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pandas as pd
import torch
from tqdm.auto import tqdm

from mathcircuits._errors import FixableTypeError, FixableValueError
from mathcircuits.data.tokenizer_id import tokenizer_fingerprint

__all__ = ["accuracy_table", "check_tokenizer", "filter_correct", "length_groups", "padded_groups", "score_pairs"]


def length_groups(lengths: list[int], batch_size: int, keys: list[Any] | None = None) -> list[list[int]]:
    """Indices grouped by equal length (and equal key), split into batches (so no batch needs padding).

    Args:
        lengths: the length of each item.
        batch_size: the largest batch.
        keys: an optional second grouping key per item, e.g. the template, so a batch shares its
            few-shot prefix (which a prefix-cached forward runs once).

    Returns:
        Lists of indices, shortest lengths first; each list holds items of one length (and one key).
    """
    by_len: dict[tuple[int, str], list[int]] = defaultdict(list)
    for i, n in enumerate(lengths):
        by_len[(n, "" if keys is None else str(keys[i]))].append(i)
    out = []
    for n in sorted(by_len):
        idx = by_len[n]
        out.extend(idx[j : j + batch_size] for j in range(0, len(idx), batch_size))
    return out


def padded_groups(lengths: list[int], batch_size: int, keys: list[Any] | None = None) -> list[list[int]]:
    """Indices grouped by key only (lengths may differ), sorted by length inside a key, split into batches.

    For right-padded batches of a causal LM: a row's real tokens come first and attend only to earlier
    positions, so the padding after them changes none of their logits and needs no attention mask.

    Args:
        lengths: the length of each item.
        batch_size: the largest batch.
        keys: an optional grouping key per item, e.g. the template, so a batch shares its few-shot prefix.

    Returns:
        Lists of indices; each list holds items of one key, shortest first.
    """
    by_key: dict[str, list[int]] = defaultdict(list)
    for i in range(len(lengths)):
        by_key["" if keys is None else str(keys[i])].append(i)
    out = []
    for k in sorted(by_key):
        idx = sorted(by_key[k], key=lambda i: lengths[i])
        out.extend(idx[j : j + batch_size] for j in range(0, len(idx), batch_size))
    return out


def check_tokenizer(model: Any, dataset: Any) -> None:
    """Refuse pairs made with another tokenizer than the model's (their token ids mean other text).

    Args:
        model: a model with ``tokenizer`` (others are not checked by fingerprint) and maybe ``spec.vocab_size``.
        dataset: pairs; their ``tokenizer`` column (from :func:`~mathcircuits.data.generate_pairs`) is compared.

    Raises:
        ValueError: the fingerprints differ, or a token id lies outside the model's vocabulary.
    """
    tok = getattr(model, "tokenizer", None)
    if tok is not None and "tokenizer" in dataset.column_names:
        theirs, ours = sorted(set(dataset["tokenizer"])), tokenizer_fingerprint(tok)
        if theirs != [ours]:
            raise FixableValueError(
                f"these pairs were made with another tokenizer (fingerprint {', '.join(theirs)}) than this model's "
                f"({ours}), so their token ids mean other text. ",
                "generate the pairs with this model's tokenizer (generate_pairs(model.tokenizer, ...)).",
            )
    vocab = getattr(getattr(model, "spec", None), "vocab_size", None)
    if isinstance(vocab, int):
        top = max((max(t, default=0) for t in dataset["tokens"]), default=0)
        if top >= vocab:
            raise FixableValueError(
                f"the pairs hold token id {top}, outside this model's vocabulary of {vocab}: they were made with "
                "another tokenizer. ",
                "generate the pairs with this model's tokenizer.",
            )


@torch.no_grad()
def score_pairs(
    model: Callable[[torch.Tensor], torch.Tensor],
    dataset: Any,
    batch_size: int = 32,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> Any:
    """Score the model on each pair: is every answer token the greedy prediction (teacher-forced)?

    Args:
        model: a callable from a ``[batch, seq]`` token tensor to logits (a HookedModel or an HF
            model wrapped as ``lambda t: hf(t).logits``).
        dataset: pairs with ``tokens``, ``answer_tokens`` and ``n_tokens``.
        batch_size: pairs per forward pass.
        device: where the tokens go (default: the model's ``device``, else the CPU).
        progress: show a progress bar.

    Returns:
        When ``model`` has ``logits_from(tokens, start)`` (a :class:`~mathcircuits.models.prefix.PrefixRunner`,
        a HookedModel), only the logits from the first answer position on are computed, with the shared
        few-shot prefix of each batch run once; batches are then grouped by ``template_id`` too. Rows of
        different lengths share a batch, right-padded (:func:`padded_groups`), unless ``model`` carries
        ``fwd_hooks`` (equal-length batches then).

        The dataset with the columns ``correct`` (every answer token right), ``first_correct``
        (the first one right), ``p_answer`` (probability of the first answer token) and ``logp_answer``
        (teacher-forced log-probability of the whole answer: the sum over its tokens) added or replaced.

    Raises:
        ValueError: the dataset is empty.
    """

    needed = ("tokens", "answer_tokens", "n_tokens")
    have = getattr(dataset, "column_names", None)
    if have is None:
        raise FixableTypeError(
            f"score_pairs needs a datasets.Dataset, got a {type(dataset).__name__}. ",
            "pass the pairs built by mathcircuits.data.generate_pairs (or datasets.Dataset.from_list(rows)).",
        )
    missing = [c for c in needed if c not in have]
    if missing:
        raise FixableValueError(
            f"score_pairs got a dataset without the columns {missing} (it has {list(have)}). ",
            "pass pairs built by mathcircuits.data.generate_pairs, which records the prompt tokens, "
            "their count and the answer tokens.",
        )
    if len(dataset) == 0:
        raise FixableValueError(
            "score_pairs got an empty dataset (0 pairs). ", "generate pairs first, or check the filters."
        )
    check_tokenizer(model, dataset)
    if device is None:
        device = getattr(model, "device", None) or "cpu"
    seqs = [list(t) + list(ans[:-1]) for t, ans in zip(dataset["tokens"], dataset["answer_tokens"])]
    n_prompt = list(dataset["n_tokens"])
    answers = list(dataset["answer_tokens"])
    correct = [False] * len(seqs)
    first = [False] * len(seqs)
    p_ans = [0.0] * len(seqs)
    logp = [0.0] * len(seqs)
    fast = hasattr(model, "logits_from")
    keys = list(dataset["template_id"]) if fast and "template_id" in have else None
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
    for name, col in (("correct", correct), ("first_correct", first), ("p_answer", p_ans), ("logp_answer", logp)):
        if name in dataset.column_names:
            dataset = dataset.remove_columns(name)
        dataset = dataset.add_column(name, col)
    return dataset


def filter_correct(dataset):
    """Keep the rows the model answered correctly.

    Args:
        dataset: pairs scored by :func:`score_pairs`.

    Returns:
        The rows whose ``correct`` is True.

    Raises:
        ValueError: the dataset has no ``correct`` column.
    """
    if "correct" not in dataset.column_names:
        raise FixableValueError("filter_correct needs a 'correct' column. ", "run score_pairs(model, dataset) first.")
    return dataset.filter(lambda r: r["correct"])


def accuracy_table(dataset, by: tuple[str, ...] = ("operation", "template_id")) -> Any:
    """Accuracy and mean correct-answer probability per group, plus an "(all)" row per operation.

    Args:
        dataset: pairs scored by :func:`score_pairs`.
        by: the columns to group by.

    Returns:
        A pandas DataFrame with the group columns, ``n``, ``accuracy``, ``first_token_accuracy``
        and ``mean_p_answer``.

    Raises:
        ValueError: the dataset is not scored.
    """

    if "correct" not in dataset.column_names:
        raise FixableValueError("accuracy_table needs a scored dataset. ", "run score_pairs(model, dataset) first.")
    df = dataset.select_columns([*by, "correct", "first_correct", "p_answer"]).to_pandas()

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
