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
from mathcircuits.claims.attention import RoleFinding, RoleTest, claim_c3, role_findings
from mathcircuits.claims.card import CardSettings, Claim, ClaimsCard, Verdict, fmt_interval
from mathcircuits.claims.finetune import claim_c6
from mathcircuits.claims.improve import (
    C6Ruling,
    C6Stop,
    c6_verdict,
    claim_c6_units,
    claim_c6b,
    precise_definition,
    with_unit_claims,
)
from mathcircuits.claims.knockout import claim_c2, claim_c5, drop_verdict
from mathcircuits.claims.margin import claim_c4
from mathcircuits.claims.numbers import claim_n1, claim_n2, claim_n3, with_number_claims
from mathcircuits.claims.paper import PAPER
from mathcircuits.claims.sparsity import C1_MARGIN, claim_c1, concentration, count_heads, depth_distance

__all__ = [
    "C1_MARGIN",
    "PAPER",
    "RoleFinding",
    "RoleTest",
    "C6Ruling",
    "C6Stop",
    "CardSettings",
    "Claim",
    "ClaimsCard",
    "Verdict",
    "assess_claims",
    "claim_c1",
    "claim_c2",
    "claim_c3",
    "claim_c4",
    "claim_c5",
    "c6_verdict",
    "claim_c6",
    "claim_c6_units",
    "claim_c6b",
    "claim_n1",
    "claim_n2",
    "claim_n3",
    "concentration",
    "count_heads",
    "depth_distance",
    "drop_verdict",
    "fmt_interval",
    "precise_definition",
    "role_findings",
    "with_number_claims",
    "with_unit_claims",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
