"""What the circuit study hands the report: each operation's circuit and its faithfulness curve."""

from __future__ import annotations

from mathcircuits.circuit import Circuit, Faithfulness
from mathcircuits.pipeline.reader import ResultReader
from mathcircuits.pipeline.studies.circuit.stage import CircuitSummary, check_pool, run
from mathcircuits.pipeline.studies.shared import IdentifySummary
from mathcircuits.pipeline.study import Contribution, StudyCode
from mathcircuits.report import ReportParts

__all__: list[str] = []


def report(r: ResultReader) -> Contribution:
    """The circuit of each operation identify patched, and its faithfulness, where the circuit study wrote them."""
    ctx, paths = r.ctx, r.ctx.paths
    ops = ctx.summary("identify", IdentifySummary).patched_operations
    circuits = {op: c for op in ops if (c := r.load(Circuit, paths.circuit(op), "circuit"))}
    faiths = {op: f for op in circuits if (f := r.load(Faithfulness, paths.circuit_faithfulness(op)))}
    return Contribution(parts=ReportParts(circuit=circuits, circuit_faithfulness=faiths))


CODE = StudyCode(run=run, summary=CircuitSummary, report=report, preflight=check_pool)
