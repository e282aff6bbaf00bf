"""Two models, one report: the same run configuration on two models, compared claim by claim.

:class:`RunResults` holds one run's saved results; :func:`compare_runs` makes the
:class:`ModelComparison` (every quantity with both intervals, a difference only where they
separate); :func:`write_comparison` writes its page, tables and figures. The CLI command
``mathcircuits compare-models RUN_A RUN_B --out DIR`` reads two run folders and does all three.
"""

from mathcircuits._checks import check_exports
from mathcircuits.crossmodel.compare import compare_runs
from mathcircuits.crossmodel.figures import comparison_figures
from mathcircuits.crossmodel.measures import SEPARATIONS, Separation, depth_interval, separation
from mathcircuits.crossmodel.page import comparison_html, write_comparison
from mathcircuits.crossmodel.result import ClaimPair, ComparedValue, KeyHeadRow, ModelComparison, RunResults

__all__ = [
    "SEPARATIONS",
    "ClaimPair",
    "ComparedValue",
    "KeyHeadRow",
    "ModelComparison",
    "RunResults",
    "Separation",
    "compare_runs",
    "comparison_figures",
    "comparison_html",
    "depth_interval",
    "separation",
    "write_comparison",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
