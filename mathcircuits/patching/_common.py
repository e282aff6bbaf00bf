"""Shared plumbing for the patching methods: batching pairs and reading last-position activations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from mathcircuits.data.filter import length_groups

__all__ = ["PairBatch", "iter_batches", "check_dataset", "capture", "metric_from_logits"]

_REQUIRED = ("tokens", "cf_tokens", "answer_token")


@dataclass
class PairBatch:
    idx: list[int]
    tokens: Tensor  # [batch, seq]
    cf_tokens: Tensor  # [batch, seq]
    answer: Tensor  # [batch]


def check_dataset(dataset: Any, spec: Any) -> None:
    """Clear errors for datasets patching cannot use."""
    missing = [c for c in _REQUIRED if c not in dataset.column_names]
    if missing:
        raise ValueError(f"the dataset lacks columns {missing}. Fix: build it with mathcircuits.data.generate_pairs.")
    if len(dataset) == 0:
        raise ValueError("the dataset is empty. Fix: generate pairs (and keep some that the model answers correctly).")
    for i, (t, c) in enumerate(zip(dataset["tokens"], dataset["cf_tokens"])):
        if len(t) != len(c):
            raise ValueError(
                f"pair {i}: the reference prompt has {len(t)} tokens but the counterfactual has {len(c)}. "
                "Path patching needs token-aligned pairs. Fix: regenerate with counterfactual words that tokenize like the operator."
            )
    vocab = spec.vocab_size
    bad = [i for i, a in enumerate(dataset["answer_token"]) if not 0 <= a < vocab]
    if bad:
        raise ValueError(f"pairs {bad[:5]} have answer tokens outside the model's vocabulary ({vocab}). Fix: generate the pairs with this model's tokenizer.")


def iter_batches(dataset: Any, batch_size: int, device: torch.device) -> list[PairBatch]:
    """Batches of pairs with equal token length (no padding, so the last position is the same for all)."""
    toks = dataset["tokens"]
    cfs = dataset["cf_tokens"]
    ans = dataset["answer_token"]
    out = []
    for idx in length_groups([len(t) for t in toks], batch_size):
        out.append(
            PairBatch(
                idx=idx,
                tokens=torch.tensor([toks[i] for i in idx], device=device),
                cf_tokens=torch.tensor([cfs[i] for i in idx], device=device),
                answer=torch.tensor([ans[i] for i in idx], device=device),
            )
        )
    return out


@torch.no_grad()
def capture(bridge: Any, tokens: Tensor, names: list[str], position: int = -1) -> tuple[Tensor, dict[str, Tensor]]:
    """One forward; return the logits at ``position`` and each named activation at ``position``."""
    store: dict[str, Tensor] = {}

    def make(name: str) -> Any:
        # keyed by the requested name: the bridge may report an aliased hook.name
        def hook(act: Tensor, hook: Any) -> None:
            store[name] = act[:, position].detach().clone()

        return hook

    # only the patched position's logits are needed: skip the unembedding elsewhere when it is the last one
    extra = {"logits_to_keep": 1} if position == -1 else {}
    logits = bridge.run_with_hooks(tokens, fwd_hooks=[(n, make(n)) for n in names], **extra)
    return logits[:, position], store


def metric_from_logits(metric: str, patched: Tensor, clean: Tensor, patched_p: Tensor | None = None, clean_p: Tensor | None = None) -> Tensor:
    """The effect of a patch: relative logit change (paper), logit difference, or probability change."""
    if metric == "relative_logit":
        return (patched - clean) / clean
    if metric == "logit_diff":
        return patched - clean
    if metric == "prob_change":
        assert patched_p is not None and clean_p is not None
        return patched_p - clean_p
    raise ValueError(f"metric {metric!r} is unknown. Fix: use relative_logit, logit_diff or prob_change.")
