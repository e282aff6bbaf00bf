"""Compare two runs of one configuration on two models: :func:`compare_runs` builds the :class:`ModelComparison`.

Each claim of the card and each quantity of :mod:`~mathcircuits.crossmodel.measures` is read on both runs
with its interval, layers as relative depths, and the separation rule marks a difference.
"""

from __future__ import annotations

import math

from mathcircuits._errors import FixableValueError
from mathcircuits.claims import Claim
from mathcircuits.crossmodel.measures import (
    attention_excess,
    depth_interval,
    key_depth,
    key_share,
    knockout_point,
    mlp_depth,
    no_interval,
    separation,
)
from mathcircuits.crossmodel.result import ClaimPair, ComparedValue, KeyHeadRow, ModelComparison, RunResults
from mathcircuits.models import Head, ModelSpec
from mathcircuits.stats import Interval, Uncertainty
from mathcircuits.stats.interval import DEFAULT_CONFIDENCE

__all__ = ["compare_runs"]


def _claim_interval(c: Claim, spec: ModelSpec) -> Interval:
    e = c.estimate
    if math.isnan(e.value):
        return no_interval(e.n)
    iv = Interval(e.value, e.low, e.high, e.n, DEFAULT_CONFIDENCE, "claim")
    if c.unit == "layer":  # C4: a layer of this model, as relative depth ("none" = n_layers → +inf)
        return depth_interval(iv, spec.n_layers)
    return iv


def _pair(section: str, quantity: str, unit: str, a: Interval, b: Interval, note: str = "") -> ComparedValue:
    return ComparedValue(section, quantity, unit, a, b, separation(a, b), note)


def compare_runs(a: RunResults, b: RunResults, uncertainty: Uncertainty | None = None) -> ModelComparison:
    """Compare two runs of one configuration on two models (see the module docstring).

    ``uncertainty``: the bootstrap of the attention and MLP intervals; None: the default resamples and seed at
    the level of ``a``'s claims card. ValueError when the cards hold different claims or both runs are of the
    same model.
    """
    if [c.id for c in a.claims.claims] != [c.id for c in b.claims.claims]:
        raise FixableValueError(
            f"the claims cards of {a.folder} and {b.folder} hold different claims. ",
            "re-run the report stage of both runs with the same mathcircuits version.",
        )
    if a.model == b.model:
        raise FixableValueError(
            f"{a.folder} and {b.folder} are runs of the same model ({a.model.describe()}). ",
            "compare runs of two different models.",
        )
    u = uncertainty or Uncertainty(confidence=a.claims.confidence)
    conf = u.confidence
    claims = []
    for ca, cb in zip(a.claims.claims, b.claims.claims):
        ia, ib = _claim_interval(ca, a.model), _claim_interval(cb, b.model)
        unit = "relative depth" if ca.unit == "layer" else ca.unit
        claims.append(
            ClaimPair(
                ca.id,
                ca.title,
                unit,
                ca.verdict,
                cb.verdict,
                ca.measurement,
                cb.measurement,
                ia,
                ib,
                separation(ia, ib),
            )
        )
    values: list[ComparedValue] = []
    if a.key is not None and b.key is not None:
        values.append(
            _pair(
                "key heads",
                "share of heads that are key heads",
                "share of heads",
                key_share(a.key, conf),
                key_share(b.key, conf),
            )
        )
        values.append(
            _pair(
                "key heads",
                "median relative depth of the key heads",
                "relative depth",
                key_depth(a.key, conf),
                key_depth(b.key, conf),
            )
        )
    for op in [o for o in a.knockout if o in b.knockout]:
        ka, ra, rra = knockout_point(a.knockout[op], None if a.key is None else len(a.key.heads), conf)
        kb, rb, rrb = knockout_point(b.knockout[op], None if b.key is None else len(b.key.heads), conf)
        note = f"k = {ka} of {a.model.n_layers * a.model.n_heads} heads vs {kb} of {b.model.n_layers * b.model.n_heads}"
        values.append(_pair("knockout", f"{op}: accuracy, key heads ablated", "accuracy", ra, rb, note))
        values.append(_pair("knockout", f"{op}: accuracy, as many random heads ablated", "accuracy", rra, rrb, note))
    if a.attention is not None and b.attention is not None:
        for target in ("operands", "operator"):
            values.append(
                _pair(
                    "attention",
                    f"key heads' excess attention on the {target}",
                    "share",
                    attention_excess(a.attention, target, u),
                    attention_excess(b.attention, target, u),
                    "share of the last position's attention above uniform, mean over key heads",
                )
            )
    if a.probes is not None and b.probes is not None:
        for which, what in (
            ("raising", "first MLP that raises the answer"),
            ("lens_top1", "first layer the logit lens ranks the answer top-1"),
        ):
            values.append(
                _pair(
                    "MLPs",
                    what,
                    "relative depth",
                    mlp_depth(a.probes, which, u),
                    mlp_depth(b.probes, which, u),
                    "layer / (n_layers − 1); none: no such layer",
                )
            )
    heads = [r for run in (a, b) for r in _key_head_rows(run, u)]
    return ModelComparison(
        labels=(a.label, b.label),
        models=(a.model, b.model),
        folders=(a.folder, b.folder),
        claims=tuple(claims),
        values=tuple(values),
        key_heads=tuple(heads),
        confidence=conf,
        seed=u.seed,
    )


def _key_head_rows(run: RunResults, uncertainty: Uncertainty) -> list[KeyHeadRow]:
    if run.key is None:
        return []
    key, n = run.key, run.model.n_layers
    roles: dict[Head, tuple[str, Interval, Interval]] = {}
    if run.attention is not None:
        for r in run.attention.head_roles(uncertainty):
            roles[r.head] = (r.head_class, r.excess_operands, r.excess_operator)
    nan = float("nan")
    rows = []
    for i, (layer, head) in enumerate(key.heads):
        role, ex_ab, ex_op = roles.get((layer, head), ("", no_interval(), no_interval()))
        rows.append(
            KeyHeadRow(
                model=run.label,
                layer=layer,
                head=head,
                relative_depth=layer / max(1, n - 1),
                effect=key.head_scores[i] if i < len(key.head_scores) else nan,
                stability=key.stability[i] if i < len(key.stability) else nan,
                role=role,
                excess_operands=ex_ab,
                excess_operator=ex_op,
            )
        )
    return rows
