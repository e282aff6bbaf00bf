"""Claims: the paper's six claims beside this run's measurements, with verdicts.

:func:`assess_claims` reads the saved results of a run (key components, knockout, transfer,
attention, MLP probes, evaluation) and returns a :class:`ClaimsCard`: per claim the paper's
statement and number, this run's measurement with its interval, and a verdict (*holds*,
*does not hold*, *inconclusive at this sample size*, or *not measured*) given by the rules
of :mod:`.rules`, written out in ``docs/claims.md``. The card sits above the analyses and
below the pipeline: the report stage builds it, the report shows it first. :mod:`.improve` holds the
C6 rule and C6b (precise beats random heads), read from the ``compare`` stage's units when it ran.
"""

from mathcircuits.claims.card import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, VERDICTS, Claim, ClaimsCard
from mathcircuits.claims.improve import claim_c6_units, claim_c6b, precise_definition, with_unit_claims
from mathcircuits.claims.rules import (
    PAPER,
    assess_claims,
    claim_c1,
    claim_c2,
    claim_c3,
    claim_c4,
    claim_c5,
    claim_c6,
    drop_verdict,
)

__all__ = [
    "FAILS",
    "HOLDS",
    "INCONCLUSIVE",
    "NOT_MEASURED",
    "PAPER",
    "VERDICTS",
    "Claim",
    "ClaimsCard",
    "assess_claims",
    "claim_c1",
    "claim_c2",
    "claim_c3",
    "claim_c4",
    "claim_c5",
    "claim_c6",
    "claim_c6_units",
    "claim_c6b",
    "drop_verdict",
    "precise_definition",
    "with_unit_claims",
]
