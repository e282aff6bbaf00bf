"""The pipeline's stages, one module each, named as the CLI names them, and their one ordered registry.

``STAGES`` (data → identify → validate → analyze → circuit → finetune → evaluate → compare → report)
is read by the runner (order, fingerprints, upstream checks), by the CLI (its
sub-commands and their help) and by the docs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mathcircuits.pipeline.context import Context, StageSummary
from mathcircuits.pipeline.stages import (
    analyze,
    circuit,
    compare,
    data,
    evaluate,
    finetune,
    identify,
    report,
    validate,
)

__all__ = ["STAGES", "Stage"]


@dataclass(frozen=True)
class Stage:
    """One pipeline stage.

    Args:
        name: the CLI sub-command and the run-folder sub-folder.
        run: the stage function, ``Context → summary``.
        summary: the summary's type (rebuilt from the ``.done.json`` marker).
        sections: the config sections it reads (they enter its fingerprint, with the model section).
        upstream: the stages whose outputs it reads.
        help: one line for ``mathcircuits --help`` and the docs.
    """

    name: str
    run: Callable[[Context], StageSummary]
    summary: type[StageSummary]
    sections: tuple[str, ...]
    upstream: tuple[str, ...]
    help: str


STAGES: dict[str, Stage] = {
    s.name: s
    for s in (
        Stage(
            "data",
            data.run,
            data.DataSummary,
            ("model", "data"),
            (),
            "build reference/counterfactual pairs, score the model, keep correct pairs, write the accuracy table",
        ),
        Stage(
            "identify",
            identify.run,
            identify.IdentifySummary,
            ("patching", "selection"),
            ("data",),
            "path-patch every head and MLP to the logits; select key components (key_components.json)",
        ),
        Stage(
            "validate",
            validate.run,
            validate.ValidateSummary,
            ("validation",),
            ("data", "identify"),
            "mean-ablation knockout (key vs random heads) and transfer to other data",
        ),
        Stage(
            "analyze",
            analyze.run,
            analyze.AnalyzeSummary,
            ("analysis",),
            ("data", "identify"),
            "attention of key heads by token role; MLP unembedding probes",
        ),
        Stage(
            "circuit",
            circuit.run,
            circuit.CircuitSummary,
            ("circuit", "data"),
            ("data",),
            "each operation's circuit (sender → receiver path patching to saturation) and its faithfulness curve",
        ),
        Stage(
            "finetune",
            finetune.run,
            finetune.FinetuneSummary,
            ("finetune", "evaluation", "data"),
            ("identify",),
            "precise SFT of the key heads (and MLPs) vs full SFT",
        ),
        Stage(
            "evaluate",
            evaluate.run,
            evaluate.EvaluateSummary,
            ("evaluation",),
            ("finetune",),
            "accuracy of base / precise / full models on held-out arithmetic and benchmarks",
        ),
        Stage(
            "compare",
            compare.run,
            compare.CompareSummary,
            ("compare", "finetune", "evaluation", "data"),
            ("identify",),
            "every fine-tuning mode at its own best learning rate (validation sweep), with intervals",
        ),
        Stage(
            "report",
            report.run,
            report.ReportSummary,
            ("analysis", "data", "evaluation", "finetune"),
            ("data", "identify", "validate", "analyze", "circuit", "evaluate", "compare"),
            "figures (HTML + static) and one offline HTML report",
        ),
    )
}
