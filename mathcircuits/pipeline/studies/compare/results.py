"""What the compare study hands the report: the fair comparison's sweep, table, points and power; C6 and C6b."""

from __future__ import annotations

from mathcircuits._files import read_json
from mathcircuits.claims.improve import claim_c6_units, claim_c6b
from mathcircuits.finetune import UnitComparison, effects_table, pareto_records, sweep_records
from mathcircuits.pipeline.reader import ResultReader
from mathcircuits.pipeline.studies.compare.stage import CompareSummary, check_sizes, run
from mathcircuits.pipeline.study import Contribution, StudyCode
from mathcircuits.report import ReportParts

__all__: list[str] = []


def report(r: ResultReader) -> Contribution:
    """Each mode at its own best rate; C6 from the units (the fair test: it replaces the evaluate study's) and C6b."""
    paths = r.ctx.paths
    cmp = r.load(UnitComparison, paths.comparison)
    if cmp is None:
        return Contribution()
    power = read_json(paths.compare_power)["statement"] if paths.compare_power.exists() else ""
    return Contribution(
        parts=ReportParts(
            comparison_sweep=sweep_records(cmp),
            comparison_table=effects_table(cmp),
            comparison_points=pareto_records(cmp),
            comparison_power=power,
        ),
        claims=(claim_c6_units(cmp), claim_c6b(cmp)),
    )


CODE = StudyCode(run=run, summary=CompareSummary, report=report, check=check_sizes)
