"""Stage ``analyze``: attention of the key heads by token role, and MLP unembedding probes (paper §4).

The attention is read on correct pairs that are not identification pairs (falling back to any when none is left).

Reads the ``analysis`` section; writes ``analyze/attention_by_role.pt/.csv``,
``analyze/attention_key_layers.pt/.csv`` (every head of the key heads' layers: claim C3 compares the key heads
with their layer-mates), ``analyze/mlp_probes.pt/.csv`` and ``analyze/head_patterns.pt``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mathcircuits.analysis import attention_by_role, head_patterns, mlp_probes
from mathcircuits.models import Head
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.pipeline.context import Context, StageSummary, save_csv, select_pairs

__all__ = ["AnalyzeSummary", "run"]


@dataclass(frozen=True)
class AnalyzeSummary(StageSummary):
    """The role class of each key head and where the MLPs start to raise the answer."""

    head_classes: dict[str, str] = field(default_factory=dict)
    first_raising_layer: int | None = None
    lens_top1_layer: int | None = None


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
    correct = ctx.load_dataset(paths.pairs_correct)
    # the heads' attention is read on pairs that did not choose them (claim C3 leaves out any that did)
    chose = set(PatchingResult.load(paths.patching("all")).pair_ids)
    fresh = correct.filter(lambda r: r["pair_id"] not in chose)
    sub = select_pairs(fresh if len(fresh) else correct, None, a.max_pairs)
    att = attention_by_role(model, sub, key)
    att.save(paths.attention())
    save_csv(att.summary(), paths.attention(".csv"))
    # claim C3 compares the key heads with the other heads of their layers: every head of those layers
    layers = sorted({l for l, _ in key.heads})
    if layers:
        mates = attention_by_role(model, sub, [(l, h) for l in layers for h in range(model.spec.n_heads)])
        mates.save(paths.attention_layers())
        save_csv(mates.summary(), paths.attention_layers(".csv"))
    adds = correct.filter(lambda r: r["operation"] == "add")
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
    )
