"""Claims: the paper's six claims beside this run's measurements, with verdicts.

:func:`assess_claims` reads the saved results of a run and returns a :class:`ClaimsCard`: per claim the paper's
statement and number, this run's measurement with its interval, and a :class:`Verdict` (*holds*, *does not hold*,
*inconclusive at this sample size*, or *not measured*) given by the rules written out in ``docs/claims.md``.
C1 is in :mod:`.sparsity`, C2 and C5 in :mod:`.knockout`, C3 in :mod:`.attention`, C4 in :mod:`.margin`, C6 in
:mod:`.finetune` (``evaluate`` stage) or :mod:`.improve` (``compare`` stage, also C6b), and N1–N3 (beyond the
paper: how numbers are represented) in :mod:`.numbers`; :mod:`.paper` holds the paper's claims and the thresholds.

Each ``claim_*`` names ``stage`` when its input is missing, or ``why_missing`` instead when the input is missing
for another reason than its stage being off. The card sits above the analyses and below the report.
"""

from mathcircuits._checks import check_exports
from mathcircuits.claims.assess import assess_claims
from mathcircuits.claims.card import CardSettings, Claim, ClaimsCard, Verdict
from mathcircuits.claims.numbers import claim_n1, claim_n2, claim_n3

__all__ = [
    "CardSettings",
    "Claim",
    "ClaimsCard",
    "Verdict",
    "assess_claims",
    "claim_n1",
    "claim_n2",
    "claim_n3",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
