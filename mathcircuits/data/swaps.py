"""Operand-swap pairs: ``(a, b)`` against ``(a′, b)`` in one template, for patching a number's state (a → a′).

The counterfactual keeps the operator and ``b`` and changes ``a``; a pair is kept only when ``a′`` takes the
token positions of ``a`` (same prompt length, same positions) and the two answers start with different tokens,
so the answer's first token tells which number the model read.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from mathcircuits._errors import FixableValueError
from mathcircuits.data.operands import compute_answer
from mathcircuits.data.pairs import PairRow
from mathcircuits.data.pairset import PairSet
from mathcircuits.data.render import answer_spacing, render_pair
from mathcircuits.data.templates import TemplateSet
from mathcircuits.data.tokenizer_id import tokenizer_fingerprint

__all__: list[str] = []


def swap_pairs(
    tokenizer: Any,
    template_sets: Sequence[TemplateSet],
    template_id: str,
    numbers: Sequence[int],
    b_values: Sequence[int],
    n: int,
    seed: int = 0,
    fewshot: bool = True,
) -> PairSet:
    """Pairs ``(a, b)`` → ``(a′, b)`` whose answers start with different tokens, rendered from a template.

    ``numbers`` are the values of ``a`` and ``a′``; ``n`` pairs at most (fewer when not enough exist). The
    counterfactual columns are ``cf_a``, ``cf_tokens``, ``cf_answer_tokens``.
    """
    found = [(s, t) for s in template_sets for t in s.templates if t.id == template_id]
    if not found:
        raise FixableValueError(f"template {template_id!r} is not loaded. ", "name a template of the loaded sets.")
    tset, tpl = found[0]
    spacing = answer_spacing(tokenizer)
    rng = random.Random(seed)
    cache: dict[tuple[int, int], PairRow | None] = {}

    def render(a: int, b: int) -> PairRow | None:
        if (a, b) not in cache:
            ans = compute_answer(tpl.operation, a, b)
            cache[(a, b)] = (
                None if ans is None else render_pair(tokenizer, tset, tpl, a, b, ans, tpl.op, {}, fewshot, spacing)
            )
        return cache[(a, b)]

    rows: list[PairRow] = []
    for _ in range(50 * n):
        if len(rows) == n:
            break
        a, a2, b = rng.choice(numbers), rng.choice(numbers), rng.choice(b_values)
        r1, r2 = render(a, b), render(a2, b) if a2 != a else None
        if r1 is None or r2 is None or len(r1["pos_a"]) != len(r2["pos_a"]) or r1["pos_a"] != r2["pos_a"]:
            continue
        if len(r1["tokens"]) != len(r2["tokens"]) or r1["answer_token"] == r2["answer_token"]:
            continue
        rows.append(
            {
                **r1,
                "words": [],
                "cf_prompt": r2["prompt"],
                "cf_tokens": r2["tokens"],
                "cf_a": a2,
                "cf_answer": r2["answer"],
                "cf_answer_tokens": r2["answer_tokens"],
                "pair_id": len(rows),
            }
        )
    fp = tokenizer_fingerprint(tokenizer)  # the pairs carry their tokenizer (PairSet.require_model)
    return PairSet.from_rows([{**row, "tokenizer": fp} for row in rows])
