"""What the data study hands the report: its summary and the accuracy table by operation and template."""

from __future__ import annotations

from mathcircuits.data import accuracy_table
from mathcircuits.pipeline.reader import ResultReader
from mathcircuits.pipeline.studies.data.stage import DataSummary, run
from mathcircuits.pipeline.study import Contribution, StudyCode
from mathcircuits.report import ReportParts

__all__: list[str] = []


def report(r: ResultReader) -> Contribution:
    """The data summary and the accuracy table (from the scored pairs, not a CSV file)."""
    ctx = r.ctx
    return Contribution(
        parts=ReportParts(
            data_summary=ctx.summary("data", DataSummary).to_dict(),
            accuracy_table=accuracy_table(ctx.load_dataset(ctx.paths.pairs_scored)),
        )
    )


CODE = StudyCode(run=run, summary=DataSummary, report=report)
