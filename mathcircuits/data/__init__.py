"""Stage ``data`` — template sets, token-aligned prompt pairs, correctness filter, benchmark files.

Templates (:mod:`~mathcircuits.data.templates`) become reference/counterfactual pairs
(:mod:`~mathcircuits.data.generate`, :mod:`~mathcircuits.data.render`) held in a :class:`PairSet`;
:mod:`~mathcircuits.data.filter` keeps those a model answers correctly, :mod:`~mathcircuits.data.correct` does
all of it in one call, :mod:`~mathcircuits.data.facts` splits by fact. Also operand-swap pairs, word problems,
MIB's counterfactual kinds and the benchmark files' one reader.
"""

from mathcircuits._checks import check_exports
from mathcircuits.data.batching import iter_batches, length_groups, padded_groups
from mathcircuits.data.benchmark_files import (
    WordProblem,
    decontaminate,
    default_benchmark_root,
    find_benchmark_file,
    read_benchmark_split,
    read_word_problems,
    record_question,
)
from mathcircuits.data.correct import correct_pairs, fresh_pairs
from mathcircuits.data.facts import Fact, drop_facts, fact_of, facts_of, split_facts
from mathcircuits.data.filter import accuracy_table, filter_correct, score_pairs
from mathcircuits.data.generate import GenerationConfig, generate_pairs, operand_pairs
from mathcircuits.data.mib_kinds import MIB_KINDS, MIBCounterfactual, mib_cf_operands, mib_template_dir
from mathcircuits.data.operands import PairError, compute_answer
from mathcircuits.data.pairs import PairBatch, PairRow, operation_rows, token_strings
from mathcircuits.data.pairset import Field, PairSet, Side, check_token_aligned, pair_batches, pair_keys
from mathcircuits.data.render import answer_spacing, prompt_start, render_pair, render_prompt
from mathcircuits.data.swaps import swap_pairs
from mathcircuits.data.templates import (
    OPERATIONS,
    Operation,
    OperationOrAll,
    Template,
    TemplateError,
    TemplateSet,
    default_template_dir,
    load_template_set,
    load_templates,
)
from mathcircuits.data.word_problems import word_problem_dataset

__all__ = [
    "Fact",
    "Field",
    "GenerationConfig",
    "MIBCounterfactual",
    "MIB_KINDS",
    "OPERATIONS",
    "Operation",
    "OperationOrAll",
    "PairBatch",
    "PairError",
    "PairRow",
    "PairSet",
    "Side",
    "Template",
    "TemplateError",
    "TemplateSet",
    "WordProblem",
    "accuracy_table",
    "answer_spacing",
    "check_token_aligned",
    "compute_answer",
    "correct_pairs",
    "decontaminate",
    "default_benchmark_root",
    "default_template_dir",
    "filter_correct",
    "fresh_pairs",
    "drop_facts",
    "fact_of",
    "facts_of",
    "find_benchmark_file",
    "generate_pairs",
    "iter_batches",
    "length_groups",
    "operand_pairs",
    "load_template_set",
    "load_templates",
    "mib_cf_operands",
    "mib_template_dir",
    "operation_rows",
    "padded_groups",
    "pair_batches",
    "pair_keys",
    "read_benchmark_split",
    "read_word_problems",
    "prompt_start",
    "record_question",
    "render_pair",
    "render_prompt",
    "score_pairs",
    "split_facts",
    "swap_pairs",
    "token_strings",
    "word_problem_dataset",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
