"""Stage ``analyze``: attention of the key heads by token role, and MLP unembedding probes (paper §4).

Reads the ``analysis`` section; writes ``analyze/attention_by_role.pt/.csv``,
``analyze/attention_key_layers.pt/.csv`` (every head of the key heads' layers: claim C3 compares the key heads
with their layer-mates), ``analyze/mlp_probes.pt/.csv`` and ``analyze/head_patterns.pt``. Its pairs come from
analyze's own facts (:mod:`~mathcircuits.pipeline.facts`), none of which chose the heads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mathcircuits._errors import FixableRuntimeError
from mathcircuits.analysis import attention_by_role, head_patterns, mlp_probes
from mathcircuits.data.facts import facts_of
from mathcircuits.models import Head
from mathcircuits.patching import KeyComponents
from mathcircuits.pipeline.context import Context, StageSummary, save_csv, select_pairs
from mathcircuits.pipeline.facts import FactUse, fact_use, stage_rows
from mathcircuits.pipeline.studies.shared import patched_facts

__all__: list[str] = []


@dataclass(frozen=True)
class AnalyzeSummary(StageSummary):
    """The role class of each key head and where the MLPs start to raise the answer."""

    head_classes: dict[str, str] = field(default_factory=dict)
    first_raising_layer: int | None = None
    lens_top1_layer: int | None = None
    facts: FactUse | None = None  # the facts analysed; shared with identify's patched pairs: 0

    def lines(self) -> list[str]:
        return [line for line in super().lines() if not line.startswith("  facts:")] + (
            [self.facts.line()] if self.facts is not None else []
        )


def run(ctx: Context) -> AnalyzeSummary:
    """Attention of the key heads by token role, and MLP unembedding probes, on correct pairs.

    Args:
        ctx: the run context.

    Returns:
        The stage summary.
    """
    a, paths = ctx.config.analysis, ctx.paths
    model = ctx.model
    key = KeyComponents.load(paths.key_components)
    key.check_model(model.spec)
    everything = ctx.load_dataset(paths.pairs_correct)
    correct = stage_rows(everything, "analyze")
    sub = select_pairs(correct, None, a.max_pairs)
    if not len(sub):
        raise FixableRuntimeError(
            "no correct pair has a fact of analyze's share, so there is nothing to analyse. ",
            "raise data.n_per_template or analyze's share in data.stage_fact_shares.",
        )
    att = attention_by_role(model, sub, key, progress=ctx.progress)
    att.save(paths.attention())
    save_csv(att.summary(), paths.attention(".csv"))
    # claim C3 compares the key heads with the other heads of their layers: every head of those layers
    layers = sorted({l for l, _ in key.heads})
    if layers:
        mates = attention_by_role(
            model, sub, [(l, h) for l in layers for h in range(model.spec.n_heads)], progress=ctx.progress
        )
        mates.save(paths.attention_layers())
        save_csv(mates.summary(), paths.attention_layers(".csv"))
    adds = correct.of_operations(("add",))
    probe_data = select_pairs(adds if len(adds) else correct, None, a.max_pairs)
    probes = mlp_probes(model, probe_data, case_row=a.probe_prompt or 0)
    probes.save(paths.probes())
    save_csv(probes.to_dataframe(), paths.probes(".csv"))
    patterns = head_patterns(model, sub, key, rows=range(min(a.circuitsvis_prompts, len(sub))), drop_prefix=True)
    patterns.save(paths.patterns)
    op = "add" if len(adds) else None
    return AnalyzeSummary(
        head_classes={str(Head(*h)): c for h, c in zip(att.heads, att.classify())},
        first_raising_layer=probes.first_raising_layer(op) if op else None,
        lens_top1_layer=probes.lens_top1_layer(op) if op else None,
        facts=fact_use(
            "analyze",
            facts_of(sub) | facts_of(probe_data),
            ctx.config.data.stage_facts(),
            {"identify": patched_facts(ctx, everything)},
        ),
    )
