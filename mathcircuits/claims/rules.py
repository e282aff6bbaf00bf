"""The rule behind each claim of the card, in the rule function's own words.

The card's "why each verdict" list shows, beside each claim's reason, the first paragraph of the docstring of the
function that decides it (:data:`RULES`), so the rule a reader sees is the one the code states, never a copy.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable

from mathcircuits.claims.attention import claim_c3
from mathcircuits.claims.knockout import claim_c2, claim_c5
from mathcircuits.claims.margin import claim_c4
from mathcircuits.claims.numbers import claim_n1, claim_n2, claim_n3
from mathcircuits.claims.sparsity import claim_c1

__all__: list[str] = []

#: The function that decides each claim (C6 and C6b come from the evaluate or the compare stage's rules).
RULES: dict[str, Callable[..., object]] = {
    "C1": claim_c1, "C2": claim_c2, "C3": claim_c3, "C4": claim_c4, "C5": claim_c5,
    "N1": claim_n1, "N2": claim_n2, "N3": claim_n3,
}  # fmt: skip


def rule_text(claim_id: str) -> str:
    """The first paragraph of the docstring of the function deciding ``claim_id``, as plain text (``""`` for a
    claim without an entry in :data:`RULES`): a ``:data:`` threshold replaced by its value in the function's module,
    other Sphinx roles reduced to the name, literals unquoted, one line."""
    fn = RULES.get(claim_id)
    if fn is None:
        return ""
    first = (inspect.getdoc(fn) or "").split("\n\n")[0]

    def name(m: re.Match[str]) -> str:
        role, target = m.group(1), m.group(2).rsplit(".", 1)[-1]
        value = vars(sys.modules[fn.__module__]).get(target) if role == "data" else None
        return f"{value:.3g}" if isinstance(value, (int, float)) else target  # a threshold: its value in the code

    text = re.sub(r":(\w+):`~?([^`]*)`", name, first)
    return " ".join(text.replace("``", "").split())
