"""The pair set: prompt pairs as one record with typed accessors, the only reader of their columns.

A :class:`PairSet` wraps the ``datasets.Dataset`` that :func:`~mathcircuits.data.generate_pairs` builds (one
row per reference/counterfactual pair; columns in :mod:`mathcircuits.data.pairs`). Code outside ``data/``
reads it through the properties below, never by column name; a property whose column the set lacks raises
the column check's error. ``save``/``load`` keep the ``save_to_disk`` folder format of earlier runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import datasets
import torch
from torch import Tensor

from mathcircuits._errors import FixableFileNotFoundError, FixableNotADirectoryError, FixableValueError
from mathcircuits._files import ResultFileError, atomic_dir
from mathcircuits.data.batching import iter_batches
from mathcircuits.data.pairs import PairBatch, PairRow, check_columns
from mathcircuits.data.tokenizer_id import ANY_TOKENIZER, tokenizer_fingerprint

__all__ = [
    "Field",
    "PairSet",
    "Side",
]

#: A column a pair set may have (``has`` asks for one; the properties read them).
Field = Literal[
    "tokens", "cf_tokens", "answer_token", "answer_tokens", "cf_answer_tokens", "n_tokens", "prefix_len",
    "pos_a", "pos_b", "pos_op", "pos_last", "operation", "template_id", "pair_id", "prompt", "cf_prompt",
    "answer", "cf_answer", "a", "b", "cf_a", "correct", "first_correct", "p_answer", "logp_answer", "form",
    "fact_stage",
]  # fmt: skip

#: One prompt of every pair: the reference (``"tokens"``) or the counterfactual (``"cf_tokens"``).
Side = Literal["tokens", "cf_tokens"]


@contextmanager
def quiet_datasets() -> Iterator[None]:
    """Within the block, ``datasets`` draws no bars ("Saving the dataset", "Flattening the indices"), then as before.

    A pair set is a few hundred rows: those bars say nothing but fill a notebook's output. Values are unchanged.
    """
    was_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_on:
            datasets.enable_progress_bars()


def _positions(value: Any) -> tuple[int, ...]:
    return (int(value),) if isinstance(value, int) else tuple(value)


class PairSet:
    """Prompt pairs; immutable (every operation returns a new set), read through typed properties."""

    def __init__(self, dataset: datasets.Dataset) -> None:
        self._data = dataset
        self._cache: dict[str, tuple[Any, ...]] = {}
        self._readers: list[tuple[Any, Any, bool]] = []  # (tokenizer, spec, scored) that require_model passed

    @classmethod
    def from_rows(cls, rows: Sequence[PairRow]) -> PairSet:
        """A pair set of row dicts with the columns of :func:`~mathcircuits.data.generate_pairs`."""
        return cls(datasets.Dataset.from_list([dict(r) for r in rows]))

    @classmethod
    def concat(cls, sets: Sequence[PairSet]) -> PairSet:
        """The rows of ``sets`` one after the other (their columns must agree)."""
        return cls(datasets.concatenate_datasets([s._data for s in sets]))

    @classmethod
    def load(cls, path: str | Path) -> PairSet:
        """A set saved by :meth:`save` (or ``Dataset.save_to_disk``), in memory: later selections write no cache."""
        if not Path(path).exists():
            raise FixableFileNotFoundError(
                f"{path} is missing. ", "run the stage that writes it first (mathcircuits run)."
            )
        folder = Path(path)
        if not (folder / "dataset_info.json").is_file() or not (folder / "state.json").is_file():
            what = "a file" if folder.is_file() else "a folder without a saved pair set (dataset_info.json, state.json)"
            raise ResultFileError(
                f"{path} is {what}, where a pair set saved by PairSet.save belongs. ",
                "pass the folder PairSet.save wrote (a run's data/pairs_<op>), or re-run the stage that writes it.",
            )
        return cls(datasets.load_from_disk(str(path), keep_in_memory=True))

    def save(self, path: str | Path) -> None:
        """Write the ``save_to_disk`` folder atomically, without ``cache-*.arrow`` leftovers."""
        if Path(path).exists() and not Path(path).is_dir():
            raise FixableNotADirectoryError(
                f"{path}: a file is where a saved pair set (a folder) belongs. ",
                "move or delete the file, or save to another path",
                str(path),
            )
        with atomic_dir(path) as tmp, quiet_datasets():
            self._data.save_to_disk(str(tmp))
            for cache in tmp.glob("cache-*.arrow"):
                cache.unlink()

    @property
    def dataset(self) -> datasets.Dataset:
        """The wrapped dataset, for ``data/`` and the dataset tools (``to_pandas``); not for reading pairs."""
        return self._data

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        ops = sorted(set(self.operations)) if self.has("operation") and len(self) else []
        return f"PairSet({len(self)} pairs{', ' + ', '.join(map(str, ops)) if ops else ''})"

    def has(self, *fields: Field) -> bool:
        """Whether the set has every one of ``fields`` (sets built by hand may lack some)."""
        return all(f in self._data.column_names for f in fields)

    def require(self, fields: Sequence[Field], caller: str) -> None:
        """Refuse a set without ``fields`` or without pairs, naming ``caller`` and the fix."""
        check_columns(self._data, fields, caller)

    def require_model(self, model: Any, caller: str, scored: bool = True) -> None:
        """Refuse pairs this model cannot read, or that another model chose, naming ``caller`` and the fix.

        Token ids beyond the model's vocabulary, pairs without the tokenizer fingerprint (made before pairs
        recorded one: their ids cannot be told from another tokenizer's) or with another tokenizer's are refused.
        With ``scored``, pairs that :func:`~mathcircuits.data.score_pairs` found correct with another model
        (column ``scored_by``) are refused too: every model-reading verb assumes the model answers its pairs, and
        another model's correct pairs include ones this model gets wrong. Pairs never scored are taken, and so are
        pairs of random ids (fingerprint :data:`~mathcircuits.data.tokenizer_id.ANY_TOKENIZER`). An empty set
        is refused (nothing to read). A model that passed once is not checked again on this set (a set is immutable).
        """
        tok, spec = getattr(model, "tokenizer", None), getattr(model, "spec", None)
        if any(t is tok and sp is spec and sc == scored for t, sp, sc in self._readers):
            return
        data = self._data
        if len(self) == 0:
            raise FixableValueError(
                f"{caller} got an empty dataset (0 pairs), so there is nothing to read. ",
                "pass pairs, e.g. mc.correct_pairs(model, 'add', n=12); a filter or select that kept none: loosen it.",
            )
        vocab = getattr(spec, "vocab_size", None)
        if isinstance(vocab, int) and "tokens" in data.column_names:
            top = max((max(t, default=0) for t in self.tokens), default=0)
            if top >= vocab:
                raise FixableValueError(
                    f"{caller}: the pairs hold token id {top}, outside this model's vocabulary of {vocab}: they were "
                    "made with another tokenizer. ",
                    "generate the pairs with this model's tokenizer.",
                )
        if tok is not None:
            if "tokenizer" not in data.column_names:
                raise FixableValueError(
                    f"{caller}: these pairs carry no tokenizer fingerprint (column 'tokenizer'; pairs made before "
                    "pairs recorded one), so nothing tells whether their token ids mean this model's text. ",
                    "regenerate them with generate_pairs(model.tokenizer, ...) (or correct_pairs(model, ...)); rows "
                    "built by hand: give each a 'tokenizer': tokenizer_fingerprint(model.tokenizer) "
                    "(mathcircuits.data.tokenizer_id).",
                )
            theirs, ours = sorted(set(data["tokenizer"]) - {ANY_TOKENIZER}), tokenizer_fingerprint(tok)
            if theirs and theirs != [ours]:
                raise FixableValueError(
                    f"{caller}: these pairs were made with another tokenizer (fingerprint {', '.join(theirs)}) than "
                    f"this model's ({ours}), so their token ids mean other text. ",
                    "generate the pairs with this model's tokenizer (generate_pairs(model.tokenizer, ...)).",
                )
        if scored and spec is not None and "scored_by" in data.column_names:
            by, ours = sorted(set(data["scored_by"]) - {""}), spec.fingerprint()
            if by and by != [ours]:
                raise FixableValueError(
                    f"{caller}: these pairs were scored by another model ({', '.join(by)}), not this one ({ours}): "
                    "the pairs it answers correctly are not this model's. ",
                    "score them with this model: filter_correct(score_pairs(model, pairs)), or correct_pairs(model, "
                    "...).",
                )
        self._readers.append((tok, spec, scored))

    def _col(self, name: Field, convert: Any = None) -> tuple[Any, ...]:
        if name not in self._cache:  # read once: a Dataset column read converts the whole column each time
            if name not in self._data.column_names:
                check_columns(self._data, (name,), f"PairSet.{name}")
            self._cache[name] = tuple(self._data[name] if convert is None else map(convert, self._data[name]))
        return self._cache[name]

    def _ids(self, name: Field) -> tuple[tuple[int, ...], ...]:
        return self._col(name, tuple)

    def _positions(self, name: Field) -> tuple[tuple[int, ...], ...]:
        return self._col(name, _positions)  # sets built by hand may give one position as an int

    # the pair's tokens and positions
    @property
    def tokens(self) -> tuple[tuple[int, ...], ...]:
        return self._ids("tokens")

    @property
    def cf_tokens(self) -> tuple[tuple[int, ...], ...]:
        """Each counterfactual prompt's token ids (as many as the reference's)."""
        return self._ids("cf_tokens")

    def side(self, side: Side) -> tuple[tuple[int, ...], ...]:
        """The reference prompts' tokens (``"tokens"``) or the counterfactual ones (``"cf_tokens"``)."""
        return self._ids(side)

    @property
    def answer_token(self) -> tuple[int, ...]:
        """Each answer's first token."""
        return self._col("answer_token")

    @property
    def answer_tokens(self) -> tuple[tuple[int, ...], ...]:
        return self._ids("answer_tokens")

    @property
    def cf_answer_tokens(self) -> tuple[tuple[int, ...], ...]:
        return self._ids("cf_answer_tokens")

    @property
    def n_tokens(self) -> tuple[int, ...]:
        return self._col("n_tokens")

    @property
    def prefix_len(self) -> tuple[int, ...]:
        """Tokens of each prompt's few-shot prefix."""
        return self._col("prefix_len")

    @property
    def pos_a(self) -> tuple[tuple[int, ...], ...]:
        return self._positions("pos_a")

    @property
    def pos_b(self) -> tuple[tuple[int, ...], ...]:
        return self._positions("pos_b")

    @property
    def pos_op(self) -> tuple[tuple[int, ...], ...]:
        return self._positions("pos_op")

    @property
    def pos_last(self) -> tuple[int, ...]:
        return self._col("pos_last")

    # what the pair is
    @property
    def operations(self) -> tuple[str, ...]:
        """Each pair's operation (an ``Operation``; ``"word_problem"`` or ``"copy"`` for the other sets)."""
        return self._col("operation")

    @property
    def template_ids(self) -> tuple[str, ...]:
        return self._col("template_id")

    @property
    def forms(self) -> tuple[str, ...]:
        """Each pair's template form (``"equation"``, ``"question"``, ...)."""
        return self._col("form")

    @property
    def pair_ids(self) -> tuple[int, ...]:
        """Each pair's id within its generation."""
        return self._col("pair_id", int)

    def labels(self) -> dict[str, list[Any]]:
        """Each pair's ``operations``, ``template_ids`` and ``pair_ids`` as lists, for a result record's fields
        (``Result(..., **pairs.labels())``): ``"?"`` where a hand-built set lacks the operation or template,
        the pair's position where it lacks ids."""
        n = len(self)
        return {
            "operations": list(self.operations) if self.has("operation") else ["?"] * n,
            "template_ids": list(self.template_ids) if self.has("template_id") else ["?"] * n,
            "pair_ids": list(self.pair_ids) if self.has("pair_id") else list(range(n)),
        }

    @property
    def prompts(self) -> tuple[str, ...]:
        return self._col("prompt")

    @property
    def cf_prompts(self) -> tuple[str, ...]:
        return self._col("cf_prompt")

    @property
    def answers(self) -> tuple[str, ...]:
        return self._col("answer", str)

    @property
    def cf_answers(self) -> tuple[str, ...]:
        """Each counterfactual answer's text (operand counterfactuals)."""
        return self._col("cf_answer", str)

    @property
    def a(self) -> tuple[int, ...]:
        return self._col("a", int)

    @property
    def b(self) -> tuple[int, ...]:
        return self._col("b", int)

    @property
    def cf_a(self) -> tuple[int, ...]:
        """Each counterfactual's first operand (operand-swap pairs)."""
        return self._col("cf_a", int)

    @property
    def correct(self) -> tuple[bool, ...]:
        """Whether the model got each answer right (after ``score_pairs``)."""
        return self._col("correct")

    @property
    def p_answer(self) -> tuple[float, ...]:
        """Each answer's first-token probability (after ``score_pairs``)."""
        return self._col("p_answer")

    @property
    def first_correct(self) -> tuple[bool, ...]:
        """Whether the model got each answer's first token right (after ``score_pairs``)."""
        return self._col("first_correct")

    @property
    def logp_answer(self) -> tuple[float, ...]:
        """Each answer's teacher-forced log-probability (after ``score_pairs``)."""
        return self._col("logp_answer")

    @property
    def fact_stages(self) -> tuple[str, ...]:
        """The stage each pair's fact belongs to (``""``: none), after :meth:`with_fact_stages`."""
        return self._col("fact_stage")

    def template_keys(self) -> tuple[Any, ...]:
        """Each pair's template id (``0`` for all when the set has none): batches grouped by it share a prefix."""
        return self.template_ids if self.has("template_id") else (0,) * len(self)

    # new sets
    def select(self, indices: Iterable[int]) -> PairSet:
        """The pairs at ``indices``, in that order."""
        return PairSet(self._data.select(list(indices)))

    def where(self, keep: Sequence[bool]) -> PairSet:
        """The pairs whose entry of ``keep`` is true, in order."""
        return self.select([i for i, k in enumerate(keep) if k])

    def of_operations(self, operations: Collection[str]) -> PairSet:
        """The pairs of these operations, in order."""
        return self.where([o in operations for o in self.operations])

    def of_templates(self, template_ids: Collection[str], keep: bool = True) -> PairSet:
        """The pairs of these templates (``keep=False``: of every other template), in order."""
        return self.where([(t in template_ids) == keep for t in self.template_ids])

    def of_pair_ids(self, pair_ids: Collection[int]) -> PairSet:
        """The pairs with these ids, in order."""
        return self.where([i in pair_ids for i in self.pair_ids])

    def shuffle(self, seed: int) -> PairSet:
        """The pairs in a seeded order (the ``datasets`` shuffle, so orders of earlier runs hold)."""
        return PairSet(self._data.shuffle(seed=seed))

    def train_test_split(self, test_size: int | float, seed: int) -> tuple[PairSet, PairSet]:
        """A random split into (train, test) pairs, as ``datasets.Dataset.train_test_split`` draws it."""
        split = self._data.train_test_split(test_size=test_size, seed=seed)
        return PairSet(split["train"]), PairSet(split["test"])

    def with_fact_stages(self, stages: Sequence[str]) -> PairSet:
        """The set with each pair's fact stage recorded (replacing an earlier record)."""
        with quiet_datasets():  # add_column flattens a selection's indices
            data = self._data.remove_columns([c for c in ("fact_stage",) if c in self._data.column_names])
            return PairSet(data.add_column("fact_stage", list(stages)))

    def batches(self, size: int, device: torch.device | str, answers: bool = False) -> list[PairBatch]:
        """Batches of pairs of equal token length and one template (so a batch shares its few-shot prefix).

        ``answers=True`` also batches every answer token (``answers`` ``[batch, n_answer]``; a batch then has one
        answer length).
        """
        self.require(("tokens", "cf_tokens", "answer_token"), "pair batches")
        cols: dict[str, Sequence[Any]] = {
            "tokens": self.tokens,
            "cf_tokens": self.cf_tokens,
            "answer": self.answer_token,
        }
        keys: Sequence[Any] = self.template_keys()
        if answers:
            self.require(("answer_tokens",), "teacher-forced path patching")
            cols["answers"] = self.answer_tokens
            keys = [f"{k}|{len(a)}" for k, a in zip(keys, cols["answers"])]
        cols["group"] = keys  # one template per batch: its few-shot prefix runs once
        return [PairBatch(idx=idx, **b) for idx, b in iter_batches(cols, size, device, group_by="group")]

    def prompt_batches(
        self, size: int, device: torch.device | str, side: Side = "tokens"
    ) -> Iterator[tuple[list[int], Tensor]]:
        """``(row indices, [batch, seq] tokens)`` of one side's prompts, of equal length and one template."""
        cols = {"tokens": self.side(side), "template_id": self.template_keys()}
        for idx, batch in iter_batches(cols, size, device, group_by="template_id"):
            yield idx, batch["tokens"]


def pair_batches(pairs: PairSet, batch_size: int, device: torch.device | str, answers: bool = False) -> list[PairBatch]:
    """``pairs.batches(batch_size, device, answers)``: batches of equal token length (no padding)."""
    return pairs.batches(batch_size, device, answers)


def pair_keys(pairs: PairSet) -> list[str]:
    """A short fingerprint of each pair (its prompt's and counterfactual's tokens), to tell the same pair again.

    ``pair_id`` only counts rows within one generation, so two draws share ids; the tokens do not lie.
    Empty when the pairs have no ``tokens``.
    """
    if not pairs.has("tokens"):
        return []
    cols = [pairs.tokens, pairs.cf_tokens] if pairs.has("cf_tokens") else [pairs.tokens]
    rows = zip(*cols)
    return [hashlib.blake2b(repr([list(map(int, c)) for c in row]).encode(), digest_size=8).hexdigest() for row in rows]


def check_token_aligned(pairs: PairSet, vocab_size: int) -> None:
    """Refuse pairs path patching cannot use: prompts of unequal token length, answers outside the vocabulary."""
    pairs.require(("tokens", "cf_tokens", "answer_token"), "path patching")
    for i, (t, c) in enumerate(zip(pairs.tokens, pairs.cf_tokens)):
        if len(t) != len(c):
            raise FixableValueError(
                f"pair {i}: the reference prompt has {len(t)} tokens but the counterfactual has {len(c)}. "
                "Path patching needs token-aligned pairs. ",
                "regenerate with counterfactual words that tokenize like the operator.",
            )
    bad = [i for i, a in enumerate(pairs.answer_token) if not 0 <= a < vocab_size]
    if bad:
        raise FixableValueError(
            f"pairs {bad[:5]} have answer tokens outside the model's vocabulary ({vocab_size}). ",
            "generate the pairs with this model's tokenizer.",
        )
