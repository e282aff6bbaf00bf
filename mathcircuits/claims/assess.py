"""The claims card of a run: every claim's rule applied to the run's saved results.

Usage::

    card = assess_claims(key=key, knockout={"add": ko}, transfer=tr, attention=att, probes=probes,
                         evals={"base": base, "precise": precise, "full": full})
    print("\\n".join(card.lines()))
"""

from __future__ import annotations

from collections.abc import Mapping

from mathcircuits.ablation import KnockoutResult, TransferResult
from mathcircuits.analysis import AttentionByRole, MLPProbeResult
from mathcircuits.claims.card import CardSettings, ClaimsCard
from mathcircuits.claims.components import claim_c1, claim_c3, claim_c4
from mathcircuits.claims.finetune import claim_c6
from mathcircuits.claims.knockout import claim_c2, claim_c5
from mathcircuits.evaluation import EvalResult
from mathcircuits.patching import KeyComponents
from mathcircuits.stats import DEFAULT_CONFIDENCE, DEFAULT_N_BOOT

__all__ = ["assess_claims"]


def assess_claims(
    *,
    key: KeyComponents | None = None,
    knockout: Mapping[str, KnockoutResult] | None = None,
    transfer: TransferResult | None = None,
    attention: AttentionByRole | None = None,
    probes: MLPProbeResult | None = None,
    evals: Mapping[str, EvalResult] | None = None,
    off: Mapping[str, str] | None = None,
    reasons: Mapping[str, str] | None = None,
    precise: str = "",
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> ClaimsCard:
    """The claims card C1–C6 from a run's saved results; a missing input makes its claim "not measured".

    Args:
        key: the key components (with their selection stability).
        knockout: operation → knockout result.
        transfer: the transfer result.
        attention: the attention-by-role result of the key heads.
        probes: the MLP probe result.
        evals: label (``base``, ``precise``, ``full``) → evaluation result.
        off: input name (``key``, ``knockout``, ``transfer``, ``attention``, ``probes``, ``evals``) → the stage
            to name when it is missing (default: the stage that writes it).
        reasons: input name → the whole reason it is missing, when that is not its stage being off
            (e.g. its file was written by an older version); takes precedence over ``off``.
        precise: what "precise" tuned in this run, printed in C6.
        n_boot: bootstrap resamples.
        seed: bootstrap seed.
        confidence: level of every interval.

    Returns:
        The :class:`ClaimsCard`.
    """
    o = {"key": "identify", "knockout": "validate", "transfer": "validate", "attention": "analyze"}
    o |= {"probes": "analyze", "evals": "evaluate"} | dict(off or {})
    why = dict(reasons or {})
    claims = (
        claim_c1(key, confidence, o["key"], why.get("key")),
        claim_c2(knockout, key, confidence, o["knockout"], why.get("knockout")),
        claim_c3(attention, n_boot, seed, confidence, o["attention"], why.get("attention")),
        claim_c4(probes, key, n_boot, seed, confidence, o["probes"], why.get("probes")),
        claim_c5(transfer, confidence, o["transfer"], why.get("transfer")),
        claim_c6(evals, n_boot, seed, confidence, o["evals"], why.get("evals"), precise),
    )
    return ClaimsCard(claims=claims, confidence=confidence, seed=seed, settings=CardSettings(n_boot=n_boot))
