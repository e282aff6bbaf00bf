"""What the circuit functions read from a pair dataset: teacher-forced batches and their labelled positions.

Every circuit function scores the **whole answer** (``answer_logprob``): on both sides the sequence is
the prompt plus the answer's tokens but the last, so the logits at the last prompt position and each
answer position predict the answer's tokens (SmolLM2 writes "12" as "1", "2")::

    tokens    = prompt    + answer[:-1]        readout positions  n_prompt − 1 … seq − 1
    cf_tokens = cf_prompt + answer[:-1]

A batch holds one template, prompt length and answer length, so positions mean the same in every row
and the prefix is shared. Position labels (the names circuit nodes use):

* ``"roles"``: ``A``, ``B``, ``op``, ``last`` (a multi-token role is read at its last token);
* ``"query"``: every position from the first difference between the prompts to ``last``, by role where
  it has one, else by offset from the end of the prompt (``"-2"``: the token before ``last``);
* ``"suffix"``: every position after the few-shot prefix, by offset (``"-1"`` is ``last``).

Answer positions are ``ans1``, ``ans2``, … in every mode. Positions before the first difference are
identical in both runs (causal attention), so nothing there can have an effect.

Usage::

    batches = circuit_batches(model, pairs, positions="query", batch_size=8)
    batches[0].where            # {"op": 31, "-4": 32, "B": 33, "-2": 34, "last": 35, "ans1": 36}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, get_args

import torch
from jaxtyping import Int
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.circuit.config import ScanPositions
from mathcircuits.data import Field, PairSet
from mathcircuits.data.batching import iter_batches
from mathcircuits.models import HookedModel, shared_prefix_len

__all__ = [
    "CircuitBatch",
    "circuit_batches",
]

Positions = ScanPositions  # the one definition is in circuit.config
POSITIONS: tuple[str, ...] = get_args(Positions)
ROLES: dict[str, Field] = {"A": "pos_a", "B": "pos_b", "op": "pos_op", "last": "pos_last"}
_NEEDED: tuple[Field, ...] = ("tokens", "cf_tokens", "answer_tokens", "prefix_len", *ROLES.values())


@dataclass(frozen=True)
class CircuitBatch:
    """Teacher-forced pairs of one template, prompt length and answer length, with labelled positions.

    ``tokens``/``cf_tokens`` end with the answer's tokens but the last; ``prefix_len`` is shared by every
    row on both sides; ``first_diff`` is where some row's prompts first differ (``seq`` when none does);
    ``roles`` has the role positions whatever the labelling.
    """

    idx: list[int]
    tokens: Int[Tensor, "batch seq"]
    cf_tokens: Int[Tensor, "batch seq"]
    answers: Int[Tensor, "batch n_answer"]
    n_prompt: int
    prefix_len: int
    first_diff: int
    where: dict[str, int]
    roles: dict[str, int]
    templates: list[str]
    operations: list[str]

    @property
    def readout(self) -> list[int]:
        """The positions whose logits predict the answer's tokens."""
        return list(range(self.n_prompt - 1, self.tokens.shape[1]))

    @property
    def answer_labels(self) -> list[str]:
        """Labels of the positions whose logits are read: ``last``-position label first, then ``ans1``, …"""
        at = {p: lab for lab, p in self.where.items()}
        return [at[p] for p in self.readout if p in at]


def _last(p: Any) -> int:
    return int(p[-1]) if isinstance(p, (list, tuple)) else int(p)


def scan_positions(
    roles: dict[str, int], n_prompt: int, n_answer: int, prefix_len: int, first_diff: int, positions: str
) -> dict[str, int]:
    """Label → position for one batch, in position order (see the module docstring)."""
    if positions not in POSITIONS:
        raise FixableValueError(f"positions {positions!r} is unknown. ", f"use one of {list(POSITIONS)}.")
    if positions == "roles":
        out = dict(roles)
    else:
        start = prefix_len if positions == "suffix" else min(first_diff, n_prompt - 1)
        by_pos = {p: lab for lab, p in roles.items()} if positions == "query" else {}
        out = {by_pos.get(p, str(p - n_prompt)): p for p in range(start, n_prompt)}
    for j in range(1, n_answer):
        out[f"ans{j}"] = n_prompt - 1 + j
    return dict(sorted(out.items(), key=lambda kv: kv[1]))


def label_order(label: str) -> tuple[int, int]:
    """A sort key that puts labels in reading order across templates: offsets and roles, then answers."""
    if label.startswith("ans"):
        return (2, int(label[3:]))
    named = {"A": -90, "op": -80, "B": -70, "last": -1}
    return (1, named[label] if label in named else int(label) if label.lstrip("-").isdigit() else 0)


def circuit_batches(
    model: HookedModel,
    pairs: PairSet,
    positions: str = "query",
    batch_size: int = 8,
    rows: Sequence[int] | None = None,
) -> list[CircuitBatch]:
    """Teacher-forced batches of a pair set, grouped by template, prompt length and answer length.

    ``pairs``: pairs of :func:`mathcircuits.data.generate_pairs`; ``rows``: only these (None: all).
    """
    pairs.require_model(model, "circuit_batches")
    missing = [c for c in _NEEDED if not pairs.has(c)]
    if missing:
        raise FixableValueError(
            f"the pair set lacks columns {missing}, which circuit functions read. ",
            "build it with mathcircuits.data.generate_pairs.",
        )
    if len(pairs) == 0:
        raise FixableValueError("the pair set is empty. ", "pass pairs the model answers correctly.")
    keep = list(range(len(pairs))) if rows is None else list(rows)
    answers = [list(pairs.answer_tokens[i]) for i in keep]
    toks = [list(pairs.tokens[i]) + a[:-1] for i, a in zip(keep, answers)]
    cf = [list(pairs.cf_tokens[i]) + a[:-1] for i, a in zip(keep, answers)]
    bad = [keep[j] for j, (t, c) in enumerate(zip(toks, cf)) if len(t) != len(c)]
    if bad:
        raise FixableValueError(
            f"pair {bad[0]}: the prompt and the counterfactual differ in token length. ",
            "use token-aligned pairs (mathcircuits.data.generate_pairs).",
        )
    labels = pairs.labels()
    templates, ops = labels["template_ids"], labels["operations"]
    n_prompt = [len(pairs.tokens[i]) for i in keep]
    at = {"A": pairs.pos_a, "B": pairs.pos_b, "op": pairs.pos_op, "last": pairs.pos_last}  # ROLES' columns
    group = [f"{templates[i]}|{n}|{len(a)}" for i, n, a in zip(keep, n_prompt, answers)]
    cols = {"tokens": toks, "cf_tokens": cf, "answers": answers, "group": group}
    out = []
    for local, b in iter_batches(cols, batch_size, model.device, group_by="group"):
        rows_ = [keep[j] for j in local]
        t, c = b["tokens"], b["cf_tokens"]
        np_ = n_prompt[local[0]]
        differ = (t != c).any(0).nonzero()
        first = int(differ[0]) if len(differ) else t.shape[1]
        # the few-shot prefix every row shares (templates with word pools render their examples per row)
        prefix = min(min(pairs.prefix_len[i] for i in rows_), shared_prefix_len(torch.cat([t, c]), np_ - 1))
        roles = {}
        for label in ROLES:
            vals = {_last(at[label][i]) % np_ for i in rows_}
            if len(vals) != 1:
                raise FixableValueError(
                    f"the pairs of template {templates[rows_[0]]} have their {label} token at different positions "
                    f"{sorted(vals)}. ",
                    "regenerate the pairs (one template, one length share the roles' positions).",
                )
            roles[label] = vals.pop()
        where = scan_positions(roles, np_, b["answers"].shape[1], prefix, first, positions)
        out.append(
            CircuitBatch(
                idx=rows_,
                tokens=t,
                cf_tokens=c,
                answers=b["answers"],
                n_prompt=np_,
                prefix_len=prefix,
                first_diff=first,
                where=where,
                roles=roles,
                templates=[templates[i] for i in rows_],
                operations=[ops[i] for i in rows_],
            )
        )
    return out
