"""Claims: the paper's six claims beside this run's measurements, with verdicts.

:func:`assess_claims` reads the saved results of a run (key components, knockout, transfer,
attention, MLP probes, evaluation) and returns a :class:`ClaimsCard`: per claim the paper's
statement and number, this run's measurement with its interval, and a :class:`Verdict`
(*holds*, *does not hold*, *inconclusive at this sample size*, or *not measured*) given by
the rules, written out in ``docs/claims.md``:

* :mod:`.paper` — the claims as the paper states them, and the rules' thresholds;
* :mod:`.sparsity` — C1 (how many heads matter, by tests over heads with templates as units; depth vs random
  heads);
* :mod:`.attention` — C3 by role: operand and operator heads against their layer-mates, the attention sink left out;
* :mod:`.margin` — C4 (the later MLPs' margin with the key heads knocked out, against the random head sets of C2);
* :mod:`.knockout` — C2 and C5, through one knockout rule (:func:`drop_verdict`: a floor and a random-set null);
* :mod:`.finetune` — C6 (precise vs full SFT) from the ``evaluate`` stage;
* :mod:`.improve` — the C6 rule (full must beat base first), C6 and C6b (precise beats matched random heads)
  from the ``compare`` stage's units, when it ran;
* :mod:`.assess` — the card from a run's results;
* :mod:`.numbers` — N1–N3, beyond the paper: how numbers are represented and combined.

The card sits above the analyses and below the report, which shows it first.
"""

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
