"""The claims card of a run: every claim's rule applied to the run's saved results.

Example::

    card = assess_claims(patching=overall, key=key, control=control, transfer=tr, attention=att,
                         mediation=mediation, evals={"base": base, "precise": precise, "full": full})
    print("\\n".join(card.lines()))
"""

from __future__ import annotations

from collections.abc import Mapping

from mathcircuits.ablation import CrossOperation, MLPMediation, RandomControl, TransferResult
from mathcircuits.analysis import AttentionByRole
from mathcircuits.claims.attention import claim_c3
from mathcircuits.claims.card import CardSettings, ClaimsCard
from mathcircuits.claims.finetune import claim_c6
from mathcircuits.claims.knockout import claim_c2, claim_c5
from mathcircuits.claims.margin import claim_c4
from mathcircuits.claims.sparsity import claim_c1
from mathcircuits.evaluation import EvalResult
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.interval import DEFAULT_UNCERTAINTY

__all__ = ["assess_claims"]


def assess_claims(
    *,
    patching: PatchingResult | None = None,
    key: KeyComponents | None = None,
    control: RandomControl | None = None,
    transfer: TransferResult | None = None,
    attention: AttentionByRole | None = None,
    mediation: MLPMediation | None = None,
    cross: CrossOperation | None = None,
    evals: Mapping[str, EvalResult] | None = None,
    off: Mapping[str, str] | None = None,
    reasons: Mapping[str, str] | None = None,
    precise: str = "",
    uncertainty: Uncertainty = DEFAULT_UNCERTAINTY,
) -> ClaimsCard:
    """The claims card C1–C6 from a run's saved results; a missing input makes its claim "not measured".

    ``patching`` is the pooled result with per-pair head effects (C1); ``control`` the key set's knockout against
    depth-matched random sets on fresh pairs (C2); ``attention`` covers the key heads and the other heads of their
    layers (C3); ``cross`` each operation's own key set (C5's overlap half); ``evals`` maps
    ``base``/``precise``/``full`` to evaluation results. ``off`` maps an input name to the
    stage to name when it is missing (default: the stage that writes it); ``reasons`` gives the whole reason instead
    and takes precedence. ``uncertainty``'s confidence is also the Wilson intervals'.
    """
    o = {"patching": "identify", "key": "identify", "control": "validate", "transfer": "validate"}
    o |= {"attention": "analyze", "mediation": "validate", "evals": "evaluate"} | dict(off or {})
    why = dict(reasons or {})
    chose = patching.pair_ids if patching is not None and patching.pair_ids else None  # C3 leaves them out
    claims = (
        claim_c1(patching, key, uncertainty, o["patching"], why.get("patching")),
        claim_c2(control, uncertainty, o["control"], why.get("control")),
        claim_c3(attention, key, uncertainty, o["attention"], why.get("attention"), chose),
        claim_c4(mediation, uncertainty, o["mediation"], why.get("mediation")),
        claim_c5(transfer, uncertainty.confidence, o["transfer"], why.get("transfer"), cross),
        claim_c6(evals, uncertainty, o["evals"], why.get("evals"), precise),
    )
    u = uncertainty
    return ClaimsCard(claims=claims, confidence=u.confidence, seed=u.seed, settings=CardSettings(n_boot=u.n_boot))
