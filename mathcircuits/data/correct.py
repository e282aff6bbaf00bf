"""Correct prompt pairs for one operation: generate → score → keep the correct ones → take the first ``n``.

Zhang et al. (ICML 2024, §3.1) analyse only prompts the model answers correctly.
Notebooks and analyses start from the same recipe: build token-aligned pairs
from templates (:func:`~mathcircuits.data.generate_pairs`), score the model on
them (:func:`~mathcircuits.data.score_pairs`), keep the correct ones
(:func:`~mathcircuits.data.filter_correct`). :func:`correct_pairs` is that recipe
as one call, so that every caller gets the same pairs for the same arguments.

Usage::

    model = load_model("embedded")
    pairs = correct_pairs(model, "add", n=12, template_ids=("add_eq_1",), seed=8)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mathcircuits.data.filter import filter_correct, score_pairs
from mathcircuits.data.generate import GenerationConfig, PairError, generate_pairs
from mathcircuits.data.pairs import PairSet
from mathcircuits.data.templates import TemplateSet, load_templates

if TYPE_CHECKING:  # the data layer sits below models: the hooked model is named for the signature only
    from mathcircuits.models import HookedModel

__all__ = ["correct_pairs"]


def correct_pairs(
    model: HookedModel,
    operation: str = "add",
    n: int | None = 12,
    templates: Sequence[TemplateSet] | None = None,
    template_ids: Sequence[str] | None = None,
    n_per_template: int = 16,
    seed: int = 0,
    fewshot: bool = True,
    batch_size: int = 32,
) -> PairSet:
    """The first ``n`` pairs of one operation that ``model`` answers correctly.

    Args:
        model: a hooked model from :func:`mathcircuits.models.load_model`.
        operation: one of :data:`~mathcircuits.data.OPERATIONS`, e.g. ``"add"``.
        n: how many correct pairs to return, in generation order; None: all of them.
        templates: template sets to draw from; None: every file of ``data_templates/``.
        template_ids: only these templates of the operation; None: all of them.
        n_per_template: pairs generated per template before filtering.
        seed: seed of :class:`~mathcircuits.data.GenerationConfig` (operand order, words).
        fewshot: put the template's few-shot prefix before each query.
        batch_size: scoring batch size.

    Returns:
        A ``datasets.Dataset`` of ``n`` (or all) correct pairs, with the columns of
        :func:`~mathcircuits.data.generate_pairs` and the scores ``correct``,
        ``first_correct`` and ``p_answer``.

    Raises:
        PairError: ``n`` is below 1, the generation settings are invalid, or fewer than
            ``n`` pairs are correct (the message gives the counts and the fix).
    """
    if n is not None and n < 1:
        raise PairError(f"n={n} asks for no pair. Fix: pass n >= 1, or n=None for every correct pair.")
    config = GenerationConfig(
        operations=(operation,),
        template_ids=tuple(template_ids) if template_ids is not None else None,
        n_per_template=n_per_template,
        fewshot=fewshot,
        seed=seed,
    )
    sets = list(templates) if templates is not None else load_templates()
    pairs = generate_pairs(model.tokenizer, sets, config)
    correct = filter_correct(score_pairs(model, pairs, batch_size=batch_size, device=model.device))
    if n is None:
        return correct
    if len(correct) < n:
        raise PairError(
            f"the model answers {len(correct)} of {len(pairs)} {operation!r} pairs correctly, fewer than n={n}. "
            f"Fix: raise n_per_template (now {n_per_template}), add templates, or lower n."
        )
    return correct.select(range(n))
