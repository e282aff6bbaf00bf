"""How numbers are read: how a tokenizer writes them, at which token they are read, and the depth labels.

Reading a number. GPT-2, GPT-J and Llama 3 have one token for each number up to several hundred; SmolLM2,
Llama 2 and Gemma split numbers into digits. Every analysis reads a number **at its last token** (for a
digit-split tokenizer the units digit, where the model must gather the tens digit by attention), and every
result stores one sentence saying so.

Where numbers are combined. At a digit-split tokenizer's last token the model starts from the units digit alone,
so ``n mod T`` for any ``T`` dividing 10 is the tokenizer's, at every depth and every later position (attention
can copy that token anywhere): no reading separates the model's periodic features from the tokenizer's there.
Only periods whose residue the units digit does not fix (4, 20, 25 on 0–99) need the digits combined. For
single-token numbers the read token is the whole number, and every period is testable.

Depths. ``depth d`` is the residual stream after ``d`` blocks at that token: depth 0 is the token embedding,
depth ``L`` the final residual. "At depth 0" is a baseline that knows only the token itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

__all__: list[str] = []

Tokenization = Literal["single-token", "multi-token"]


def number_token_counts(tokenizer: Any, context: str, numbers: Sequence[int]) -> list[int]:
    """How many tokens each number takes when written right after ``context`` (tokens overlapping its digits)."""
    out = []
    for n in numbers:
        text = context + str(n)
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        lo, hi = len(context), len(text)
        out.append(sum(1 for s, e in enc["offset_mapping"] if e > lo and s < hi and e > s))
    return out


def number_reading(counts: Sequence[int], numbers: Sequence[int]) -> tuple[Tokenization, str]:
    """The tokenization kind (``"single-token"`` or ``"multi-token"``) and the sentence saying where they are read."""
    lo, hi = min(numbers), max(numbers)
    if max(counts) == 1:
        return "single-token", (f"each number {lo}–{hi} is one token here; it is read at that token (its last token)")
    return "multi-token", (
        f"this tokenizer writes the numbers {lo}–{hi} as {min(counts)}–{max(counts)} tokens (digits); each number "
        "is read at its last token, i.e. the units digit, where the model must gather the other digits by attention "
        "(so only periods the units digit does not fix test how the model combines them)"
    )


def token_fixed_periods(
    tokenization: Tokenization, numbers: Sequence[int], last_tokens: Sequence[int], periods: Sequence[int]
) -> tuple[int, ...]:
    """The periods ``T`` whose residue ``n mod T`` the read token fixes while it is not the whole number.

    Every two numbers read at the same token share ``n mod T`` (digit-split: the divisors of 10); none for
    single-token numbers, whose read token is the whole number.
    """
    if tokenization == "single-token":
        return ()
    by_token: dict[int, set[int]] = {}
    for n, t in zip(numbers, last_tokens):
        by_token.setdefault(int(t), set()).add(int(n))
    return tuple(int(t) for t in periods if all(len({n % int(t) for n in ns}) == 1 for ns in by_token.values()))


def depth_labels(n_layers: int) -> tuple[str, ...]:
    """``("emb", "1", …, "L")``: the residual after ``d`` blocks (``emb`` = the token embedding)."""
    return ("emb", *(str(d) for d in range(1, n_layers + 1)))
