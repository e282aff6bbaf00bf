"""Which tokenizer made a set of pairs: a fingerprint the pairs carry and a model compares with its own."""

from __future__ import annotations

import hashlib
from typing import Any, Protocol, runtime_checkable

__all__: list[str] = []


#: the fingerprint of pairs whose token ids were drawn without a tokenizer (the engine's probe pairs): any model whose
#: vocabulary holds the ids reads them
ANY_TOKENIZER = "any"


@runtime_checkable
class Tokenizer(Protocol):
    """What the toolkit calls on a tokenizer (every Hugging Face tokenizer has it): checked at the call, so a model
    or a file name given where the tokenizer belongs is refused naming the argument."""

    def __call__(self, text: Any, *args: Any, **kwargs: Any) -> Any: ...

    def encode(self, text: Any, *args: Any, **kwargs: Any) -> Any: ...

    def decode(self, ids: Any, *args: Any, **kwargs: Any) -> Any: ...

    def convert_ids_to_tokens(self, ids: Any, *args: Any, **kwargs: Any) -> Any: ...


#: text whose token ids tell tokenizers apart: digits, operators, words and whitespace of the templates
_PROBE = "0 1 2 3 4 5 6 7 8 9 10 42 123 4567 + - * / = ? . , \n The sum of 12 and 7 is 19. Alice had apples."


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A short hash of what a tokenizer does to arithmetic text (its vocabulary size and the ids of a probe).

    Pairs record it (column ``tokenizer``), so a model with another tokenizer refuses them instead of reading
    token ids that mean other words (or lie outside its vocabulary).
    """
    ids = tokenizer(_PROBE, add_special_tokens=False)["input_ids"]
    return hashlib.sha256(repr((len(tokenizer), list(ids))).encode()).hexdigest()[:16]
