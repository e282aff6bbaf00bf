"""Stage 1 — data: template sets, token-aligned prompt pairs, correctness filter."""

from mathcircuits.data.filter import accuracy_table, filter_correct, length_groups, score_pairs
from mathcircuits.data.generate import GenerationConfig, PairError, answer_spacing, compute_answer, generate_pairs, render_pair
from mathcircuits.data.word_problems import default_benchmark_root, word_problem_dataset
from mathcircuits.data.templates import OPERATIONS, Template, TemplateError, TemplateSet, default_template_dir, load_template_set, load_templates

__all__ = [
    "OPERATIONS",
    "GenerationConfig",
    "PairError",
    "Template",
    "TemplateError",
    "TemplateSet",
    "accuracy_table",
    "answer_spacing",
    "compute_answer",
    "default_benchmark_root",
    "default_template_dir",
    "filter_correct",
    "generate_pairs",
    "length_groups",
    "load_template_set",
    "load_templates",
    "render_pair",
    "score_pairs",
    "word_problem_dataset",
]
