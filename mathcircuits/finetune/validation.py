"""The validation split a learning rate is chosen on, and the 0/1 score of arithmetic items."""

from __future__ import annotations

import torch
from torch import nn

from mathcircuits.data import PairSet, score_pairs
from mathcircuits.models import HFForward, PrefixRunner

__all__: list[str] = []


def split_validation(pool: PairSet, test: PairSet, n_validation: int, seed: int = 0) -> PairSet:
    """A validation split drawn from ``pool``, without any prompt that is also a test prompt.

    ``pool`` is generated apart from training and already has no training prompt; fewer than ``n_validation`` pairs
    come back when it is smaller.
    """
    seen = set(test.prompts)
    kept = pool.where([p not in seen for p in pool.prompts]).shuffle(seed=seed)
    return kept.select(range(min(n_validation, len(kept))))


def score_arithmetic(model: nn.Module, pairs: PairSet, batch_size: int = 32) -> list[int]:
    """0/1 per pair: is every answer token the model's greedy prediction (teacher-forced)?

    Each template's few-shot prefix runs once (:class:`~mathcircuits.models.PrefixRunner` over
    :class:`~mathcircuits.models.HFForward`); equal to the plain forward within 1e-5 (tested).
    """
    device = next(model.parameters()).device
    with torch.no_grad():  # the prefix-cached forward: each template's few-shot prefix runs once
        scored = score_pairs(PrefixRunner(HFForward(model)), pairs, batch_size=batch_size, device=device)
    return [int(bool(c)) for c in scored.correct]
