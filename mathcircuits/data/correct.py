"""Correct prompt pairs for one operation: generate → score → keep the correct ones → take the first ``n``.

Zhang et al. (ICML 2024, §3.1) analyse only prompts the model answers correctly. :func:`correct_pairs` is
that recipe as one call, so every caller gets the same pairs for the same arguments. It scores in batches,
in generation order, and stops at ``n`` correct pairs: the same pairs as scoring all, at a fraction of the
cost. :func:`fresh_pairs` draws pairs *disjoint* from given ones (e.g. to score a knockout on pairs other
than those that chose the heads).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

from tqdm.auto import tqdm

from mathcircuits._checks import Bounds
from mathcircuits.data.filter import score_pairs
from mathcircuits.data.generate import GenerationConfig, generate_pairs
from mathcircuits.data.operands import PairError
from mathcircuits.data.pairset import PairSet, pair_keys, quiet_datasets
from mathcircuits.data.templates import Operation, TemplateSet, load_templates

if TYPE_CHECKING:  # the data layer sits below models: the hooked model is named for the signature only
    from mathcircuits.models import HookedModel

__all__ = ["correct_pairs", "fresh_pairs"]

#: the template forms :func:`correct_pairs` draws from by default: short equations (``"3 + 5 ="``), the
#: cheapest prompts to score; statements, questions and word problems are longer and slower
DEFAULT_FORMS: tuple[str, ...] = ("equation",)

#: pairs asked for: each is generated and scored by a forward pass (a run's largest sets are a few thousand)
PairCount = Annotated[int, Bounds(ge=1, le=100_000, why="each pair is generated and scored by a forward pass")]


def _first_correct(
    model: HookedModel, pairs: PairSet, n: int | None, batch_size: int, progress: bool
) -> tuple[PairSet, int]:
    """The first ``n`` (None: all) correct pairs, scored ``batch_size`` rows at a time; and how many were scored."""
    kept: list[PairSet] = []
    found = scored = 0
    bar = tqdm(total=len(pairs), disable=not progress, desc="scoring pairs", unit="pair", leave=False)
    for start in range(0, len(pairs), batch_size):
        chunk = pairs.select(range(start, min(start + batch_size, len(pairs))))
        chunk = score_pairs(model, chunk, batch_size=batch_size, device=model.device)
        good = chunk.where(chunk.correct)  # filter_correct, without its bar
        scored += len(chunk)
        found += len(good)
        kept.append(good)
        bar.update(len(chunk))
        bar.set_postfix(correct=found if n is None else f"{min(found, n)}/{n}")
        if n is not None and found >= n:
            break
    bar.close()
    out = PairSet.concat(kept) if kept else pairs.select([])
    return (out if n is None or len(out) <= n else out.select(range(n))), scored


def _template_ids(
    sets: Sequence[TemplateSet], operations: Sequence[Operation], forms: Sequence[str] | None
) -> tuple[str, ...] | None:
    """The ids of the operations' templates of the given forms (None: every form)."""
    if forms is None:
        return None
    ids = tuple(t.id for s in sets for t in s.templates if t.operation in operations and t.form in forms)
    if not ids:
        have = sorted({t.form for s in sets for t in s.templates if t.operation in operations})
        raise PairError(
            f"no {'/'.join(operations)} template has a form in {list(forms)}. ",
            f"choose forms from {have}, or pass forms=None for every template.",
        )
    return ids


def correct_pairs(
    model: HookedModel,
    operation: Operation = "add",
    n: PairCount | None = 12,
    templates: Sequence[TemplateSet] | None = None,
    template_ids: Sequence[str] | None = None,
    n_per_template: int = 16,
    seed: int = 0,
    fewshot: bool = True,
    batch_size: int = 32,
    forms: Sequence[str] | None = DEFAULT_FORMS,
    progress: bool = True,
) -> PairSet:
    """The first ``n`` pairs of one operation that ``model`` answers correctly.

    ``n`` None: all; scoring stops once there are ``n`` (checked every ``batch_size`` pairs). ``template_ids``
    None: the operation's templates of ``forms`` (``"equation"``, ``"question"``, ... as tagged in
    ``data_templates/``; None: all). PairError when fewer than ``n`` are correct, giving the counts and the fix.
    """
    if n is not None and n < 1:
        raise PairError(f"n={n} asks for no pair. ", "pass n >= 1, or n=None for every correct pair.")
    sets = list(templates) if templates is not None else load_templates()
    if template_ids is None:
        template_ids = _template_ids(sets, (operation,), forms)
    config = GenerationConfig(
        operations=(operation,),
        template_ids=tuple(template_ids) if template_ids is not None else None,
        n_per_template=n_per_template,
        fewshot=fewshot,
        seed=seed,
    )
    pairs = generate_pairs(model.tokenizer, sets, config)
    correct, _ = _first_correct(model, pairs, n, batch_size, progress)
    if n is None:
        return correct
    if len(correct) < n:
        raise PairError(
            f"the model answers {len(correct)} of {len(pairs)} {operation!r} pairs correctly, fewer than n={n}. ",
            f"raise n_per_template (now {n_per_template}), add templates or forms, or lower n.",
        )
    return correct


def fresh_pairs(
    model: HookedModel,
    pairs: PairSet,
    n: PairCount = 32,
    seed: int = 1,
    templates: Sequence[TemplateSet] | None = None,
    batch_size: int = 32,
    progress: bool = True,
) -> PairSet:
    """``n`` correct pairs that share no pair with ``pairs``: same operations and templates, new draws.

    For scoring on data other than the data that chose something (key heads chosen by path patching on
    ``pairs`` look more necessary on ``pairs`` than they are). Pairs are compared by their tokens
    (:func:`~mathcircuits.data.pairset.pair_keys`); the new ``pair_id`` continue after the largest in ``pairs``;
    ``seed`` is raised by one for each further round when a round is short.
    """
    if n < 1:
        raise PairError(f"n={n} asks for no pair. ", "pass n >= 1.")
    pairs.require(("operation", "template_id", "tokens"), "fresh_pairs")
    avoid = set(pair_keys(pairs))
    config = GenerationConfig(
        operations=tuple(sorted(set(pairs.operations))),
        template_ids=tuple(sorted(set(pairs.template_ids))),
        n_per_template=max(16, n),
        fewshot=any(p > 0 for p in pairs.prefix_len) if pairs.has("prefix_len") else True,
        counterfactual="operands" if "counterfactual" in pairs.dataset.column_names else "operator",
        seed=seed,
    )
    sets = list(templates) if templates is not None else load_templates()
    found: list[PairSet] = []
    n_found = drawn = 0
    for round_ in range(4):  # a short round (many already used, or wrong) draws again, more per template
        cfg = dataclasses.replace(config, seed=seed + round_, n_per_template=config.n_per_template * 2**round_)
        new = generate_pairs(model.tokenizer, sets, cfg)
        rows = []
        for i, k in enumerate(pair_keys(new)):
            if k not in avoid:
                avoid.add(k)  # once only, within and across rounds
                rows.append(i)
        drawn += len(rows)
        if not rows:
            continue
        good, _ = _first_correct(model, new.select(rows), n - n_found, batch_size, progress)
        found += [good] if len(good) else []
        n_found += len(good)
        if n_found >= n:
            break
    if n_found < n:
        raise PairError(
            f"only {n_found} of {drawn} new pairs of templates {list(config.template_ids)} are answered correctly "
            f"and not among the {len(pairs)} given, fewer than n={n}. ",
            "lower n, or widen the operand range.",
        )
    out = PairSet.concat(found).select(range(n)).dataset
    start = max(pairs.pair_ids, default=-1) + 1 if pairs.has("pair_id") else 0
    with quiet_datasets():  # add_column flattens the selection's indices
        return PairSet(out.remove_columns("pair_id").add_column("pair_id", list(range(start, start + n))))
