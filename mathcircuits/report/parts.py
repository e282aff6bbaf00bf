"""What a report is built from: a run's results as one typed value.

:class:`ReportParts` holds the results a report shows (each optional: a stage that was off leaves
its part ``None`` and its section out). Each section (:mod:`.sections`) builds its figures from them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd
import plotly.graph_objects as go

from mathcircuits._codec import EncodedValue
from mathcircuits.ablation import KnockoutResult, TransferResult
from mathcircuits.analysis import AttentionByRole, HeadPatterns, MLPProbeResult
from mathcircuits.circuit import Circuit, Faithfulness
from mathcircuits.claims import ClaimsCard
from mathcircuits.finetune import EffectsTable, ParetoPoint, SweepPoint
from mathcircuits.models import ModelSpec
from mathcircuits.numbers import NumberResults
from mathcircuits.patching import KeyComponents, PatchingResult
from mathcircuits.stats import DeltaTable

__all__ = ["ReportParts"]


def _mapping(value: object, label: str) -> dict[str, object]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (list, tuple)):
        return {str(i): v for i, v in enumerate(value)}
    return {label: value}


@dataclass(frozen=True)
class ReportParts:
    """The results one report shows; every part is optional.

    Args:
        title: default: "Arithmetic circuits in <model name>", or "mathcircuits report".
        model_spec: read from a saved result, e.g. ``patching_overall.model``; shown in the appendix.
        patching: ``{operation: result}``, one heatmap each.
        patching_overall: the result over all pairs (default: merged from ``patching``).
        patterns: full attention patterns, shown as interactive CircuitsVis views.
        attention_layers: attention of the key heads and the other heads of their layers (what claim C3 reads);
            with it the role panels class each key head as C3 does.
        evaluation: the evaluate stage's table (:func:`~mathcircuits.evaluation.compare_table`).
        circuit: ``{operation: Circuit}``, each shown as the graph of its plateau circuit.
        comparison_sweep: the fair SFT comparison's sweep (:func:`~mathcircuits.finetune.sweep_records`).
        comparison_table: per mode at its chosen rate: what it tuned and its change against base with intervals
            over items and seeds (:func:`~mathcircuits.finetune.effects_table`).
        comparison_points: one point per trained unit (:func:`~mathcircuits.finetune.pareto_records`).
        comparison_power: the smallest precise − full difference the comparison detects.
    """

    title: str = ""
    claims: ClaimsCard | None = None
    model_spec: ModelSpec | None = None
    data_summary: Mapping[str, EncodedValue] | None = None
    accuracy_table: pd.DataFrame | None = None
    patching: Mapping[str, PatchingResult] = field(default_factory=dict)
    patching_overall: PatchingResult | None = None
    key_components: KeyComponents | None = None
    knockout: Mapping[str, KnockoutResult] = field(default_factory=dict)
    transfer: TransferResult | None = None
    attention: AttentionByRole | None = None
    attention_layers: AttentionByRole | None = None
    probes: MLPProbeResult | None = None
    patterns: HeadPatterns | None = None
    evaluation: DeltaTable | None = None
    circuit: Mapping[str, Circuit] = field(default_factory=dict)
    circuit_faithfulness: Mapping[str, Faithfulness] = field(default_factory=dict)
    comparison_sweep: tuple[SweepPoint, ...] | None = None
    comparison_table: EffectsTable | None = None
    numbers: NumberResults = field(default_factory=NumberResults)
    comparison_points: tuple[ParetoPoint, ...] | None = None
    comparison_power: str = ""
    #: what each study of a run cost: one row per study (time in seconds, peak memory)
    costs: pd.DataFrame | None = None
    extra_figures: Mapping[str, go.Figure] = field(default_factory=dict)
    notes: Sequence[str] = ()

    @classmethod
    def of(
        cls,
        *,
        patching: PatchingResult | Mapping[str, PatchingResult] | Sequence[PatchingResult] | None = None,
        knockout: KnockoutResult | Mapping[str, KnockoutResult] | Sequence[KnockoutResult] | None = None,
        circuit: Circuit | Mapping[str, Circuit] | None = None,
        circuit_faithfulness: Faithfulness | Mapping[str, Faithfulness] | None = None,
        notes: str | Sequence[str] | None = None,
        extra_figures: Mapping[str, go.Figure] | None = None,
        **parts: object,
    ) -> ReportParts:
        """The parts from looser forms: one result or a list where a mapping belongs, one note as a string.

        A single patching result is labelled by its operations; a list by each result's operations;
        one circuit (and its faithfulness) by the empty label. ``**parts``: the other fields.
        """
        if isinstance(patching, PatchingResult):
            patching = {"+".join(patching.operations) or "run": patching}
        elif isinstance(patching, (list, tuple)):
            patching = {"+".join(r.operations) or f"run {i}": r for i, r in enumerate(patching)}
        faith = circuit_faithfulness
        if circuit is not None and not isinstance(circuit, Mapping):
            circuit, faith = {"": circuit}, ({"": faith} if faith is not None else {})
        return cls(
            patching=dict(patching or {}),
            knockout=_mapping(knockout, "run"),  # type: ignore[arg-type]
            circuit=dict(circuit or {}),
            circuit_faithfulness=dict(faith or {}) if isinstance(faith, Mapping) or faith is None else {},
            notes=[notes] if isinstance(notes, str) else list(notes or []),
            extra_figures=dict(extra_figures or {}),
            **parts,  # type: ignore[arg-type]
        )

    @property
    def page_title(self) -> str:
        """The title shown: ``title``, else one naming the model."""
        if self.title:
            return self.title
        return (
            f"Arithmetic circuits in {self.model_spec.name}" if self.model_spec is not None else "mathcircuits report"
        )

    @property
    def top_source(self) -> PatchingResult | None:
        """The patching result the strongest heads are read from: over all pairs, else the first operation's."""
        if self.patching_overall is not None:
            return self.patching_overall
        return next(iter(self.patching.values()), None)
