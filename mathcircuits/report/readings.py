"""One-paragraph readings of each stage's figure, written from the result values (never recomputed).

Every function takes a result and returns plain text for the report: what the figure shows on
this run, with the numbers and their intervals, and how to read it. They are separate from the
page layout (:mod:`mathcircuits.report.sections`) so the words can be checked on their own
(``tests/test_readings.py`` fails a reading that contradicts its numbers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from mathcircuits.ablation import KnockoutResult, TransferResult
from mathcircuits.analysis import AttentionByRole, MLPProbeResult
from mathcircuits.models import Head
from mathcircuits.numbers import NumberResults
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.stats.interval import format_points, format_share, wilson_interval

__all__: list[str] = []


def _relative(v: float, lo: float, hi: float) -> str:
    """A relative change (a ratio, so in %, not points) with 3 significant digits and its unit on every number."""

    def f(x: float) -> str:
        p = 100 * x
        digits = 1 if p == 0 or not math.isfinite(p) else max(0, 2 - math.floor(math.log10(abs(p))))
        return f"{p:+.{digits}f}%"

    if any(math.isnan(x) for x in (v, lo, hi)):
        return f(v)
    return f"{f(v)} [{f(lo)}, {f(hi)}]"


def _plain(v: float, lo: float, hi: float) -> str:
    if any(math.isnan(x) for x in (v, lo, hi)):
        return f"{v:+.3g}"
    return f"{v:+.3g} [{lo:+.3g}, {hi:+.3g}]"


def reading_patching(result: PatchingResult, key: KeyComponents | None = None) -> str:
    """The strongest heads of a patching result with their intervals, and the key selection."""
    top = result.top_heads(3)
    parts = []
    for l, h, e in top:
        lo = float(result.head_low[l, h]) if result.head_low is not None else float("nan")
        hi = float(result.head_high[l, h]) if result.head_high is not None else float("nan")
        parts.append(f"{Head(l, h)} {(_relative if result.metric == 'relative_logit' else _plain)(e, lo, hi)}")
    units = {
        "relative_logit": "relative change of the answer's logit",
        "answer_logprob": "change of the whole answer's log-probability, teacher-forced over every answer token",
    }
    unit = units.get(result.metric, result.metric)
    over = "templates resampled within operations" if result.ci_method == "cluster_bootstrap" else "pairs resampled"
    text = (
        f"Each cell is the mean effect over {result.n_pairs} pairs of patching one head (or MLP) with its "
        f"counterfactual activation ({unit}); red means the component carries the answer. "
        f"The strongest heads are {', '.join(parts)} (95% bootstrap intervals, {over}). "
        "An interval that includes 0 is not distinguishable from no effect at this sample size."
    )
    total = result.total_interval()
    if total.n and total.value == total.value and abs(total.value) > 1e-12:
        text += (
            f" Replacing the whole prompt by its counterfactual changes the metric by {total.format('{:+.3g}')} "
            f"(the total effect); the strongest head, {Head(top[0][0], top[0][1])}, carries "
            f"{format_share(top[0][2] / total.value)}."
            if top
            else ""
        )
    if result.n_excluded:
        text += (
            f" {result.n_excluded} pairs were excluded because their clean answer logit was at or below the "
            "relative_logit guard (the ratio flips sign or explodes there)."
        )
    if key is not None:
        text += (
            f" The selection rule '{key.rule}' chose {len(key.heads)} key "
            f"{'head' if len(key.heads) == 1 else 'heads'} ({key.head_fraction:.1%} of all heads); they are "
            "outlined."
        )
    return text


def reading_stability(key: KeyComponents) -> str:
    """How to read the selection-stability figure, with this run's numbers."""
    if not key.has_stability:
        return "Selection stability was not measured for these key components; re-run identify to measure it."
    firm = [str(Head(l, h)) for (l, h), s in zip(key.heads, key.stability) if s >= 0.8]
    loose = [f"{Head(l, h)} ({s:.0%})" for (l, h), s in zip(key.heads, key.stability) if s < 0.5]
    text = (
        f"The pairs were resampled {key.stability_n_boot} times and the rule '{key.rule}' re-applied to each "
        "resample. A bar is the share of resamples that select the head again. "
        f"Selected in at least 80% of resamples: {', '.join(firm) or 'none'}. "
    )
    if loose:
        text += f"Selected in fewer than half: {', '.join(loose)}; these come and go with the sample. "
    if key.stability_others:
        others = ", ".join(f"{k} ({v:.0%})" for k, v in list(key.stability_others.items())[:5])
        text += f"Heads outside the selection that resamples often pick: {others}. "
    return text + "Read a head below about 50% as a candidate to confirm with more pairs, not as a finding."


def reading_knockout(items: Sequence[KnockoutResult]) -> str:
    """The knockout curves' endpoints with their Wilson intervals and the random spread."""
    parts = []
    ks: list[int] = []
    for ko in items:
        n = ko.n_pairs
        last = float(ko.ranked_accuracy[-1])
        w = wilson_interval(round(last * n), n) if n else None
        rnd = torch.as_tensor(ko.random_accuracy, dtype=torch.float32).reshape(-1, len(ko.ks))[:, -1]
        ks = ks or [int(k) for k in ko.ks]
        ranked = f"{last:.0%}" + (f" [{w.low:.0%}, {w.high:.0%}]" if w else "")
        k_last = int(ko.ks[-1])
        if rnd.numel() == 1:
            random = f"{float(rnd[0]):.0%} for 1 random order"
        else:
            random = (
                f"{float(rnd.mean()):.0%} (range {float(rnd.min()):.0%}–{float(rnd.max()):.0%}) for "
                f"{rnd.numel()} random orders"
            )
        parts.append(
            f"{ko.operation}: {ko.baseline_accuracy:.0%} with nothing removed → {ranked} with the top {k_last} "
            f"{'head' if k_last == 1 else 'heads'} removed, vs {random}" + (f" (n={n})" if n else "")
        )
    measured = ", ".join(str(k) for k in ks)
    return (
        f"Accuracy with the top k heads mean-ablated, measured at k = {measured} (the points; lines only join "
        "them), in effect-rank order (solid, with Wilson 95% error bars) and in random orders (dashed; the band, "
        "where there are several orders, is ± one std over them). "
        + "; ".join(parts)
        + ". A collapse of the solid curve far below the random curve means the top heads are necessary."
    )


def reading_transfer(result: TransferResult) -> str:
    """Which transfer sets were measurable and what ablating the key heads did on them."""
    measured = [r for r in result.rows if r.status == "measured"]
    skipped = [r for r in result.rows if r.status != "measured"]
    text = (
        "Transfer is measured only on the items the clean model answers correctly, so 100% means the ablation "
        f"lost nothing. A set is measurable when the clean model answers at least {result.min_clean_accuracy:.0%} "
        f"of it and at least {result.min_correct} items. "
    )
    if measured:
        text += "Key heads ablated: " + "; ".join(
            f"{r.dataset} {r.key.value:.0%} [{r.key.low:.0%}, {r.key.high:.0%}] vs random {r.random.value:.0%}"
            for r in measured
        )
        text += ". "
    elif skipped:
        text += "No set was measurable on this model, so there is no chart. "
    return text.rstrip()


def reading_unmeasurable(result: TransferResult) -> str:
    """The transfer sets the clean model answers too rarely to measure, as the line under the chart ("" if none).

    Each set with its clean accuracy and Wilson interval.
    """
    skipped = [r for r in result.rows if r.status != "measured"]
    if not skipped:
        return ""
    return (
        "Not measurable on this model (not drawn): "
        + "; ".join(
            f"{r.dataset} (clean accuracy {r.clean.value:.0%} [{r.clean.low:.0%}, {r.clean.high:.0%}], n={r.n})"
            for r in skipped
        )
        + "."
    )


def reading_attention(result: AttentionByRole) -> str:
    """Which key heads attend above uniform to operands or operator, with intervals."""
    df = result.summary(by_operation=False)
    parts = []
    for r, cls in zip(df.itertuples(), df["class"]):
        parts.append(
            f"{r.component} operands "
            f"{format_points(r.excess_operands, r.excess_operands_low, r.excess_operands_high)}, "
            f"operator {format_points(r.excess_operator, r.excess_operator_low, r.excess_operator_high)} ({cls})"
        )
    return (
        "Share of attention from the last position on the operands (A and B) and on the operator, minus the share "
        f"a head attending uniformly would give, over {len(result.pair_ids)} pairs (95% bootstrap intervals): "
        + "; ".join(parts[:6])
        + (f"; and {len(parts) - 6} more" if len(parts) > 6 else "")
        + ". A head attends there when its interval lies above 0. The class in brackets is the summary rule "
        f"(share ≥ {result.min_share:.0%} and at least {result.min_lift:g}× uniform)."
    )


def reading_probes(result: MLPProbeResult) -> str:
    """Where the MLPs start to write the answer, with the layer's bootstrap interval."""
    n = result.n_layers
    rise = result.layer_interval("raising")
    lens = result.layer_interval("lens_top1")

    def name(x: float) -> str:
        return "none" if x >= n else f"L{x:.0f}"

    return (
        f"Probes of each layer's MLP at the last position over {rise.n} pairs (space: {result.space}). "
        f"The first layer whose MLP update raises the answer above the other numbers by more than 0.25 logits is "
        f"{name(rise.value)} (95% bootstrap interval {name(rise.low)} to {name(rise.high)}); the logit lens ranks "
        f"the answer top-1 for most pairs from {name(lens.value)} ({name(lens.low)} to {name(lens.high)}). "
        "Bars carry bootstrap intervals, the top-1 share Wilson intervals; cosine panels show the spread (± std)."
    )


def reading_numbers(numbers: NumberResults) -> str:
    """One paragraph on the numbers stage: where numbers are read, the periods, κ, the helix and the neurons."""
    sp, pr, hx, hp, nr = numbers.spectra, numbers.probes, numbers.helix, numbers.helix_patch, numbers.neurons
    text = []
    if sp is not None:
        bands = "; ".join(f"{b}: {', '.join(f'{p:g}' for p in ps) or 'none'}" for b, ps in sp.bands().items())
        text.append(
            f"Numbers are read at their last token ({sp.reading}). Periods above the shuffled-order null, per "
            f"band of depths: {bands}. The tokenizer baseline ({sp.baseline}) already shows "
            f"{', '.join(f'{p:g}' for p in sp.baseline_periods) or 'no period'}."
        )
    if pr is not None:
        ks = "; ".join(f"{t} {pr.best(t)['score'].format('{:.2f}')} at depth {pr.best(t)['depth']}" for t in pr.targets)
        text.append(f"Best probe scores (95% bootstrap intervals): {ks}.")
    if hx is not None:
        text.append(f"Helix: {hx.headline()}.")
    if hp is not None:
        text.append(
            f"Helix patch: {hp.headline()}. A subspace patch can create an effect the whole residual does not "
            "have (Makelov et al. 2023); read it against the full patch."
        )
    if nr is not None:
        text.append(f"Neurons: {nr.headline()}.")
    return " ".join(text)
