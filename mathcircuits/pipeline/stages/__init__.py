"""The pipeline's stages, one module each, named as the CLI names them, and their one ordered registry.

``STAGES`` (data → identify → validate → analyze → circuit → numbers → finetune → evaluate → compare → report)
is read by the runner (order, fingerprints, upstream checks), by the CLI (its
sub-commands and their help) and by the docs. The registry is plain data: a stage's module (and with it torch
and the model libraries) is imported only when its ``run`` or ``summary`` is first asked for, so the CLI can
parse its arguments and print ``--help`` without them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mathcircuits.pipeline.context import Context, StageSummary

__all__ = ["STAGES", "Stage"]


@dataclass(frozen=True)
class Stage:
    """One pipeline stage.

    Args:
        name: the CLI sub-command, the run-folder sub-folder and the module ``pipeline/stages/<name>.py``.
        summary_name: the name of the summary's class in that module.
        sections: the config sections it reads (they enter its fingerprint, with the model section).
        upstream: the stages whose outputs it reads.
        help: one line for ``mathcircuits --help`` and the docs.
        switch: the config section whose ``enabled: false`` turns the stage off (None: always on).
    """

    name: str
    summary_name: str
    sections: tuple[str, ...]
    upstream: tuple[str, ...]
    help: str
    switch: str | None = None

    @property
    def run(self) -> Callable[[Context], StageSummary]:
        """The stage function, ``Context → summary`` (imports the stage's module)."""
        return importlib.import_module(f"{__name__}.{self.name}").run

    @property
    def summary(self) -> type[StageSummary]:
        """The summary's type, rebuilt from the ``.done.json`` marker (imports the stage's module)."""
        return getattr(importlib.import_module(f"{__name__}.{self.name}"), self.summary_name)


STAGES: dict[str, Stage] = {
    s.name: s
    for s in (
        Stage(
            "data",
            "DataSummary",
            ("model", "data"),
            (),
            "build reference/counterfactual pairs, score the model, keep correct pairs, write the accuracy table",
        ),
        Stage(
            "identify",
            "IdentifySummary",
            ("patching", "selection"),
            ("data",),
            "path-patch every head and MLP to the logits; select key components (key_components.json)",
        ),
        Stage(
            "validate",
            "ValidateSummary",
            ("validation",),
            ("data", "identify"),
            "mean-ablation knockout (key vs random heads) and transfer to other data",
        ),
        Stage(
            "analyze",
            "AnalyzeSummary",
            ("analysis",),
            ("data", "identify"),
            "attention of key heads by token role; MLP unembedding probes",
        ),
        Stage(
            "circuit",
            "CircuitSummary",
            ("circuit", "data"),
            ("data",),
            "each operation's circuit (sender → receiver path patching to saturation) and its faithfulness curve",
            switch="circuit",
        ),
        Stage(
            "numbers",
            "NumbersSummary",
            ("numbers",),
            ("identify",),
            "how numbers are represented: Fourier spectra, mod-T probes, helix and its patch, heuristic neurons",
            switch="numbers",
        ),
        Stage(
            "finetune",
            "FinetuneSummary",
            ("finetune", "evaluation", "data"),
            ("identify",),
            "precise SFT of the key heads (and MLPs) vs full SFT",
            switch="finetune",
        ),
        Stage(
            "evaluate",
            "EvaluateSummary",
            ("evaluation",),
            ("finetune",),
            "accuracy of base / precise / full models on held-out arithmetic and benchmarks",
            switch="evaluation",
        ),
        Stage(
            "compare",
            "CompareSummary",
            ("compare", "finetune", "evaluation", "data"),
            ("identify",),
            "every fine-tuning mode at its own best learning rate (validation sweep), with intervals",
            switch="compare",
        ),
        Stage(
            "report",
            "ReportSummary",
            ("analysis", "data", "evaluation", "finetune"),
            ("data", "identify", "validate", "analyze", "circuit", "numbers", "evaluate", "compare"),
            "figures (HTML + static) and one offline HTML report",
        ),
    )
}
