"""Stage ``data`` — template sets, token-aligned prompt pairs, correctness filter, benchmark files.

Templates (:mod:`~mathcircuits.data.templates`) become reference/counterfactual pairs
(:mod:`~mathcircuits.data.generate`, :mod:`~mathcircuits.data.render`) held in a :class:`PairSet`;
:mod:`~mathcircuits.data.filter` keeps those a model answers correctly, :mod:`~mathcircuits.data.correct` does
all of it in one call, :mod:`~mathcircuits.data.facts` splits by fact. Also operand-swap pairs, word problems,
MIB's counterfactual kinds and the benchmark files' one reader.
"""

from mathcircuits._checks import check_exports
from mathcircuits.data.correct import correct_pairs, fresh_pairs
from mathcircuits.data.facts import drop_facts
from mathcircuits.data.filter import accuracy_table, filter_correct, score_pairs
from mathcircuits.data.generate import GenerationConfig, generate_pairs
from mathcircuits.data.operands import PairError
from mathcircuits.data.pairs import PairBatch, PairRow
from mathcircuits.data.pairset import Field, PairSet, Side
from mathcircuits.data.render import prompt_start
from mathcircuits.data.templates import (
    Operation,
    Template,
    TemplateError,
    TemplateSet,
    default_template_dir,
    load_templates,
)
from mathcircuits.data.word_problems import word_problem_dataset

__all__ = [
    "Field",
    "GenerationConfig",
    "Operation",
    "PairBatch",
    "PairError",
    "PairRow",
    "PairSet",
    "Side",
    "Template",
    "TemplateError",
    "TemplateSet",
    "accuracy_table",
    "correct_pairs",
    "default_template_dir",
    "filter_correct",
    "fresh_pairs",
    "drop_facts",
    "generate_pairs",
    "load_templates",
    "prompt_start",
    "score_pairs",
    "word_problem_dataset",
]

check_exports(globals())  # every exported function checks its arguments at the call (mathcircuits._checks)
