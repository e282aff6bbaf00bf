"""Pipeline stages analyze (attention by role, MLP probes) and report (figures + one HTML report, run last)."""

from __future__ import annotations

from typing import Any

from mathcircuits._io import read_json
from mathcircuits.pipeline.stages import Context, _save_csv, _select_pairs

__all__ = ["STAGES", "stage_analyze", "stage_report"]


def stage_analyze(ctx: Context) -> dict[str, Any]:
    """Attention of the key heads by token role, and MLP unembedding probes, on correct pairs."""
    from mathcircuits.analysis import attention_by_role, head_patterns, mlp_probes
    from mathcircuits.patching import KeyComponents

    a = ctx.config.analysis
    model = ctx.model
    key = KeyComponents.load(ctx.path("identify", "key_components.json"))
    key.check_model(model.spec)
    correct = ctx.load_dataset("data", "pairs_correct")
    sub = _select_pairs(correct, None, a.max_pairs)
    att = attention_by_role(model, sub, key)
    att.save(ctx.path("analyze", "attention_by_role.pt"))
    _save_csv(att.summary(), ctx.path("analyze", "attention_by_role.csv"))
    adds = correct.filter(lambda r: r["operation"] == "add")
    probe_data = _select_pairs(adds if len(adds) else correct, None, a.max_pairs)
    probes = mlp_probes(model, probe_data, case_row=a.probe_prompt or 0)
    probes.save(ctx.path("analyze", "mlp_probes.pt"))
    _save_csv(probes.to_dataframe(), ctx.path("analyze", "mlp_probes.csv"))
    patterns = head_patterns(model, sub, key, rows=range(min(a.circuitsvis_prompts, len(sub))), drop_prefix=True)
    patterns.save(ctx.path("analyze", "head_patterns.pt"))
    classes = att.classify()
    op = "add" if len(adds) else None
    return {
        "head_classes": {f"L{l}.H{h}": c for (l, h), c in zip(att.heads, classes)},
        "first_raising_layer": probes.first_raising_layer(op) if op else None,
        "lens_top1_layer": probes.lens_top1_layer(op) if op else None,
    }


def stage_report(ctx: Context) -> dict[str, Any]:
    """Every figure (HTML + static formats) and one offline HTML report."""
    import pandas as pd

    from mathcircuits.ablation import KnockoutResult
    from mathcircuits.analysis import AttentionByRole, HeadPatterns, MLPProbeResult
    from mathcircuits.patching import KeyComponents, PatchingResult
    from mathcircuits.viz import (
        attention_heads_view,
        attention_role_distributions,
        build_report,
        find_chromium,
        knockout_curves,
        patching_heatmaps,
        probe_case_trajectory,
        probe_similarity_curves,
        save_figures,
    )

    ident = read_json(ctx.path("identify", ".done.json"))["summary"]
    ops = ident["patched_operations"]
    key = KeyComponents.load(ctx.path("identify", "key_components.json"))
    per_op = {op: PatchingResult.load(ctx.path("identify", f"patching_{op}.pt")) for op in ops}
    overall = PatchingResult.load(ctx.path("identify", "patching_all.pt"))
    knock = {op: KnockoutResult.load(ctx.path("validate", f"knockout_{op}.pt")) for op in ops}
    att = AttentionByRole.load(ctx.path("analyze", "attention_by_role.pt"))
    probes = MLPProbeResult.load(ctx.path("analyze", "mlp_probes.pt"))
    patterns = HeadPatterns.load(ctx.path("analyze", "head_patterns.pt"))
    figs: dict[Any, Any] = {}
    for label, fig in patching_heatmaps(per_op, key, overall=overall).items():
        figs[ctx.path("report", "figures", f"patching_{label}")] = fig
    figs[ctx.path("report", "figures", "knockout")] = knockout_curves(list(knock.values()))
    figs[ctx.path("report", "figures", "attention_roles")] = attention_role_distributions(att)
    figs[ctx.path("report", "figures", "mlp_probe_curves")] = probe_similarity_curves(probes)
    figs[ctx.path("report", "figures", "mlp_probe_case")] = probe_case_trajectory(probes)
    formats = list(ctx.config.analysis.static_formats)
    if formats and find_chromium() is None:
        formats = []
    save_figures({str(p): f for p, f in figs.items()}, formats=["html", *formats])
    attention_heads_view(patterns).save(ctx.path("report", "figures", "key_heads_attention.html"))
    acc = pd.read_csv(ctx.path("data", "accuracy.csv"))
    transfer = pd.read_csv(ctx.path("validate", "transfer.csv"))
    notes = f"Transfer (clean / key-ablated / random-ablated accuracy):\n{transfer.to_string(index=False)}"
    eval_table = ctx.path("evaluate", "table.csv")
    if eval_table.exists():
        notes += f"\n\nPrecise SFT vs full SFT (Table-1 style; accuracies in %):\n{pd.read_csv(eval_table).to_string(index=False)}"
    report = build_report(
        ctx.path("report", "report.html"), title=f"mathcircuits run: {ctx.config.model.source}", model_spec=ctx.model.spec,
        data_summary=read_json(ctx.path("data", ".done.json"))["summary"], accuracy_table=acc, patching=per_op,
        patching_overall=overall, key_components=key, knockout=knock, attention=att, probes=probes, patterns=patterns,
        notes=notes,
    )
    return {"report": str(report), "figures": len(figs) + 1, "static_formats": formats}


STAGES = {
    "analyze": (stage_analyze, ("analysis",), ("identify",)),
    "report": (stage_report, ("analysis",), ("validate", "analyze", "evaluate")),
}
