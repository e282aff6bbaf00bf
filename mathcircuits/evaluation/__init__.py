"""Stage ``evaluate`` — benchmark accuracy before and after fine-tuning (Zhang et al., ICML 2024, Table 1).

Benchmark files become ``BenchmarkItem`` lists (:mod:`~mathcircuits.evaluation.benchmarks`, found under
:func:`mathcircuits.data.benchmark_files.default_benchmark_root`); math word problems (AddSub, SingleEq, SVAMP) are
scored by
greedy generation (:mod:`~mathcircuits.evaluation.scoring`), the rest through lm-evaluation-harness, offline, on
the in-memory model (:mod:`~mathcircuits.evaluation.harness`); :mod:`~mathcircuits.evaluation.table` holds
``EvalResult`` and the comparison table with intervals.
"""

from mathcircuits._checks import check_exports
from mathcircuits.evaluation.benchmarks import load_benchmark
from mathcircuits.evaluation.harness import evaluate_lm_eval
from mathcircuits.evaluation.items import BenchmarkItem
from mathcircuits.evaluation.run import evaluate_model, score_benchmark
from mathcircuits.evaluation.scoring import BenchmarkScore, ScoreSettings, evaluate_math
from mathcircuits.evaluation.table import EvalResult, EvalSettings, compare_table, format_table

__all__ = [
    "BenchmarkItem",
    "BenchmarkScore",
    "EvalResult",
    "EvalSettings",
    "ScoreSettings",
    "compare_table",
    "evaluate_lm_eval",
    "evaluate_math",
    "evaluate_model",
    "format_table",
    "load_benchmark",
    "score_benchmark",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
