"""Which tokenizer made a set of pairs: a fingerprint the pairs carry and a model compares with its own."""

from __future__ import annotations

import hashlib
from typing import Any

__all__: list[str] = []

#: text whose token ids tell tokenizers apart: digits, operators, words and whitespace of the templates
_PROBE = "0 1 2 3 4 5 6 7 8 9 10 42 123 4567 + - * / = ? . , \n The sum of 12 and 7 is 19. Alice had apples."


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short hash of what a tokenizer does to arithmetic text (its vocabulary size and the ids of a probe).

    Pairs record it (column ``tokenizer``), so a model with another tokenizer refuses them instead of reading
    token ids that mean other words (or lie outside its vocabulary).
    """
    ids = tokenizer(_PROBE, add_special_tokens=False)["input_ids"]
    return hashlib.sha256(repr((len(tokenizer), list(ids))).encode()).hexdigest()[:16]
