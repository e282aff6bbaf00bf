"""Two models, one report: the same run configuration on two models, compared claim by claim.

:class:`RunResults` holds one run's saved results; :func:`compare_runs` makes the
:class:`ModelComparison` (every quantity with both intervals, a difference only where they
separate); :func:`~.page.write_comparison` writes its page, tables and figures. The CLI command
``mathcircuits compare-models RUN_A RUN_B --out DIR`` reads two run folders and does all three.
"""

from mathcircuits._checks import check_exports
from mathcircuits.crossmodel.compare import compare_runs
from mathcircuits.crossmodel.measures import Separation
from mathcircuits.crossmodel.result import ClaimPair, ComparedValue, KeyHeadRow, ModelComparison, RunResults

__all__ = [
    "ClaimPair",
    "ComparedValue",
    "KeyHeadRow",
    "ModelComparison",
    "RunResults",
    "Separation",
    "compare_runs",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
