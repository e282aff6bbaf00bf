"""The report's sections, one renderer each: typed results and their figures in, headings, readings and tables out.

Each renderer adds its section to a :class:`~mathcircuits.report.html.Page` from the results it
is given and the figures :func:`~mathcircuits.report.parts.report_figures` built once (never a
figure of its own), in the order of the page: the claims card, path patching, key heads,
knockout, transfer, attention, MLP probes, circuits, how numbers are represented (:mod:`.numbers`),
fine-tuning and evaluation, the fair SFT comparison, interactive views, extra figures. :func:`render_sections`
calls them in that order.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import plotly.graph_objects as go

from mathcircuits.ablation import KnockoutResult, TransferResult
from mathcircuits.analysis import AttentionByRole, HeadPatterns, MLPProbeResult
from mathcircuits.circuit import Circuit, Faithfulness
from mathcircuits.claims import Claim, ClaimsCard, Verdict
from mathcircuits.finetune import EffectsTable
from mathcircuits.models import ModelSpec
from mathcircuits.models.embedded import weights_note
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.report.html import Page, esc, plain_text, table
from mathcircuits.report.numbers import numbers_section
from mathcircuits.report.parts import ReportParts
from mathcircuits.report.readings import (
    reading_attention,
    reading_knockout,
    reading_patching,
    reading_probes,
    reading_stability,
    reading_transfer,
    reading_unmeasurable,
)
from mathcircuits.stats import DeltaTable
from mathcircuits.viz import attention_heads_view

__all__ = [
    "VERDICT_CLASS",
    "attention_section",
    "circuit_section",
    "claims_card",
    "compare_section",
    "evaluation_section",
    "key_section",
    "knockout_section",
    "patching_section",
    "probes_section",
    "render_sections",
    "transfer_section",
    "views_section",
]

#: The CSS class that colours each verdict on the card.
VERDICT_CLASS: dict[Verdict, str] = {
    Verdict.HOLDS: "v-holds",
    Verdict.FAILS: "v-fails",
    Verdict.INCONCLUSIVE: "v-open",
    Verdict.NOT_MEASURED: "v-none",
    Verdict.NOT_TESTABLE: "v-none",
}

Figures = Mapping[str, go.Figure]


def claims_card(page: Page, card: ClaimsCard, model: ModelSpec | None = None) -> None:
    """The claims card: one row per claim (claim, the paper's number, this run, verdict), closed by a bar.

    With the run's ``model``, a line above the table names it and, for an embedded model, its quantisation
    (the verdicts are those of that copy)."""
    rows = []
    for c in card.claims:
        rows.append(
            f'<tr><td class="id" title="{esc(c.statement)}">{esc(c.id)} {esc(c.title)}'
            f"{'<br><small>beyond the paper</small>' if c.beyond_paper else ''}</td>"
            f"<td>{esc(c.paper)}</td><td>{esc(c.measurement)}"
            f"{f'<br><small>{esc(c.interval_text)}</small>' if c.interval_text else ''}</td>"
            f'<td><span class="verdict {VERDICT_CLASS[c.verdict]}" title="{esc(c.reason)}">{esc(c.verdict)}</span>'
            "</td></tr>"
        )
    head = (
        "<tr><th>Claim (Zhang et al. 2024)</th><th>Paper</th>"
        f"<th>This run ({card.confidence:.0%} intervals)</th><th>Verdict</th></tr>"
    )
    about = ""
    if model is not None:
        weights = weights_note(model.name)
        about = f"<p>Measured on {esc(model.name)}{esc(f' ({weights})' if weights else '')}.</p>"
    page.add(
        f'<section class="card" id="claims"><h2>Claims card</h2>{about}'
        f'<table class="claims">{head}{"".join(rows)}</table><div class="card-end"></div>'
        "<details><summary>Why each verdict (rules in docs/claims.md)</summary><ul>"
        + "".join(f"<li>{esc(c.id)}: {esc(c.reason)}</li>" for c in card.claims)
        + "</ul></details></section>"
    )
    page.toc.append(("claims", "Claims"))


def patching_section(
    page: Page,
    top: PatchingResult,
    key: KeyComponents | None,
    figs: Figures,
) -> None:
    """Path patching: the strongest heads (reading and bars), then every heatmap, the overall one first."""
    page.section("patching", "Path patching (identify)")
    page.reading(reading_patching(top, key))
    page.figure(figs["patching_top_heads"])
    heatmaps = [name for name in figs if name.startswith("patching_") and name != "patching_top_heads"]
    for name in sorted(heatmaps, key=lambda n: n != "patching_overall"):
        page.figure(figs[name])
    df = top.to_dataframe()
    page.table("Strongest 20 heads with intervals", table(df[df.kind == "head"].sort_values("effect").head(20)))


def key_section(page: Page, key: KeyComponents, figs: Figures) -> None:
    """The key heads and how stable their selection is under resampling of the pairs."""
    page.section("key", "Key heads and how stable the selection is")
    page.reading(reading_stability(key))
    if "selection_stability" in figs:
        page.figure(figs["selection_stability"])
    params = plain_text(key.rule_params) if key.rule_params else "none"
    page.table(
        "Key components",
        f'<p class="note">{len(key.heads)} key heads ({key.head_fraction:.1%} of all heads) and '
        f"{len(key.mlps)} key MLPs; rule {esc(key.rule)} ({esc(params)}).</p>" + table(key.to_dataframe()),
    )


def knockout_section(page: Page, knockout: Mapping[str, KnockoutResult], figs: Figures) -> None:
    """Knockout: accuracy as the top heads are removed, beside random heads."""
    items = list(knockout.values())
    page.section("knockout", "Knockout (validate)")
    page.reading(reading_knockout(items))
    page.figure(figs["knockout"])
    frames = []
    for ko in items:
        df = ko.to_dataframe()
        df.insert(0, "operation", ko.operation)
        frames.append(df)
    page.table("Knockout accuracies", table(pd.concat(frames, ignore_index=True)))


def transfer_section(page: Page, transfer: TransferResult, figs: Figures) -> None:
    """Transfer: the key heads ablated on data not used to find them."""
    page.section("transfer", "Transfer to other data (validate)")
    page.reading(reading_transfer(transfer))
    if "transfer" in figs:
        page.figure(figs["transfer"])
    if unmeasurable := reading_unmeasurable(transfer):
        page.note(unmeasurable)
    page.table("Transfer", table(transfer.to_dataframe()))


def attention_section(page: Page, attention: AttentionByRole, figs: Figures) -> None:
    """Where the key heads attend from the last position, by token role."""
    page.section("attention", "Attention of key heads by token role (analyze)")
    page.reading(reading_attention(attention))
    for name in ("attention_excess", "attention_roles", "attention_means"):
        page.figure(figs[name])
    page.table("Attention per head and operation", table(attention.summary()))


def probes_section(page: Page, probes: MLPProbeResult, figs: Figures) -> None:
    """The MLP probes: where the MLPs start to write the answer."""
    page.section("probes", "MLP probes (analyze)")
    page.reading(reading_probes(probes))
    page.figure(figs["mlp_probe_curves"])
    page.figure(figs["mlp_probe_case"])
    means = probes.layer_summary()
    page.table("MLP probes, per layer", table(means[[c for c in means.columns if not c.endswith("_std")]]))
    page.table("MLP probes, the chosen prompt per layer", table(probes.case_dataframe()))


def circuit_section(page: Page, op: str, circ: Circuit, faith: Faithfulness | None, figs: Figures) -> None:
    """One circuit: how it was found, its faithfulness curve with the random band, the plateau circuit's graph."""
    page.section(f"circuit{('-' + op) if op else ''}", f"Circuit{(' (' + op + ')') if op else ''}")
    rounds = circ.settings.rounds
    text = (
        f"Sender → receiver path patching from the logits ({circ.method}, metric {circ.metric}, {circ.n_pairs} "
        f"discovery pairs): {len(circ.nodes) - 1} nodes, {len(circ.edges)} edges after {max(0, len(rounds) - 1)} "
        f"rounds ({circ.settings.stopped or '?'}). Edge intervals are {circ.confidence:.0%} bootstrap "
        "intervals over pairs; dashed edges enter a key/value."
    )
    if faith is not None:
        text += (
            " Faithfulness F = (m(C) − m(cf)) / (m(M) − m(cf)) on other pairs, m the whole answer's "
            "log-probability, nodes outside the circuit ablated at the query positions: " + faith.summary() + "."
        )
    page.reading(text)
    curve = f"circuit_curve_{op}" if op else "circuit_curve"
    if curve in figs:
        page.figure(figs[curve])
    page.figure(figs[f"circuit_{op}" if op else "circuit"])
    df = circ.to_dataframe().sort_values("effect", key=abs, ascending=False).head(30)
    page.table(f"Circuit edges{(' (' + op + ')') if op else ''}", table(df))
    if faith is not None and faith.curve:
        page.table(f"Faithfulness curve{(' (' + op + ')') if op else ''}", table(faith.curve_frame()))


def evaluation_section(page: Page, evaluation: DeltaTable, c6: Claim | None, figs: Figures) -> None:
    """Fine-tuning and evaluation: base vs tuned models on held-out arithmetic and benchmarks."""
    page.section("evaluation", "Fine-tuning and evaluation (evaluate)")
    page.reading(
        "Accuracy of the base model and of the fine-tuned models (precise SFT of the key heads, full SFT) on "
        "held-out arithmetic and the configured benchmarks; the bars are changes against the base model with "
        "95% paired-bootstrap intervals over the same items; the table is in the appendix. "
        + (f"Claim C6: {c6.measurement} ({c6.verdict})." if c6 is not None else "")
    )
    if "evaluation" in figs:
        page.figure(figs["evaluation"])
    page.table("Evaluation (Table-1 style)", table(evaluation.to_dataframe().reset_index()))


def compare_section(
    page: Page,
    comparison: EffectsTable,
    sweep: pd.DataFrame | None,
    figs: Figures,
    power: str = "",
    claims: ClaimsCard | None = None,
) -> None:
    """The fair SFT comparison: every mode at its own best learning rate, several seeds, the Pareto figure."""
    page.section("compare", "Fine-tuning compared at each mode's best learning rate (compare)")
    c6 = [c for c in (claims.claims if claims is not None else ()) if c.id in ("C6", "C6b")]
    page.reading(
        "Every mode trained on the same data, steps and batch; each at the learning rate that scored best on "
        "validation facts, then trained longer with several seeds. Math is held-out arithmetic on facts "
        "(operation, a, b) never trained in any wording; generic ability is likelihood benchmarks through "
        "lm-eval. The Pareto figure has one point per (mode, rate, seed): open markers are the sweep, filled "
        "ones the chosen rate per seed, crosses each mode's mean with 95% intervals over items and seeds. "
        + (f"{power}. " if power else "")
        + " ".join(f"Claim {c.id}: {c.verdict}." for c in c6)
    )
    if "compare_pareto" in figs:
        page.figure(figs["compare_pareto"])
    page.figure(figs["compare"])
    if sweep is not None:
        page.figure(figs["compare_sweep"])
        page.table("Learning-rate sweep", table(sweep))
    page.table("Fine-tuning comparison", table(comparison.to_dataframe().reset_index()))


def views_section(page: Page, patterns: HeadPatterns) -> None:
    """Interactive CircuitsVis views of the key heads' attention, one per recorded prompt."""
    page.section("views", "Attention patterns of key heads (interactive)")
    page.note(
        "CircuitsVis view: pick a head to enlarge it; hover a token to see where it attends. Rows are "
        "destinations, columns sources."
    )
    for i in range(len(patterns.patterns)):
        page.view(attention_heads_view(patterns, i))


def render_sections(page: Page, parts: ReportParts, figs: Figures) -> None:
    """Every section of the report whose results are given, in page order.

    Args:
        page: the page to add to.
        parts: the report's results.
        figs: their figures (:func:`~mathcircuits.report.parts.report_figures`).
    """
    if parts.claims is not None:
        claims_card(page, parts.claims, parts.model_spec)
    if parts.top_source is not None:
        patching_section(page, parts.top_source, parts.key_components, figs)
    if parts.key_components is not None:
        key_section(page, parts.key_components, figs)
    if parts.knockout:
        knockout_section(page, parts.knockout, figs)
    if parts.transfer is not None:
        transfer_section(page, parts.transfer, figs)
    if parts.attention is not None:
        attention_section(page, parts.attention, figs)
    if parts.probes is not None:
        probes_section(page, parts.probes, figs)
    for op, circ in parts.circuit.items():
        circuit_section(page, op, circ, parts.circuit_faithfulness.get(op), figs)
    if parts.numbers:
        numbers_section(page, parts.numbers, figs)
    if parts.evaluation is not None:
        c6 = next((c for c in parts.claims.claims if c.id == "C6"), None) if parts.claims is not None else None
        evaluation_section(page, parts.evaluation, c6, figs)
    if parts.comparison_table is not None:
        compare_section(
            page, parts.comparison_table, parts.comparison_sweep, figs, parts.comparison_power, parts.claims
        )
    if parts.patterns is not None:
        views_section(page, parts.patterns)
    if parts.extra_figures:
        page.section("extra", "More figures")
        for name, fig in parts.extra_figures.items():
            page.add(f"<h3>{esc(name)}</h3>")
            page.figure(fig)
