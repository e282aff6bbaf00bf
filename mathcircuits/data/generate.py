"""Reference / counterfactual prompt pairs from templates (Zhang et al. 2024, §3.1).

Per template we draw operands (seeded), fill word pools, and build the reference prompt (``"3 + 5 ="``,
answer ``8``) and a counterfactual: with ``counterfactual="operator"`` (the paper's) the operator ``{OP}``
becomes a word of the template's counterfactual vocabulary (``"3 < 5 ="``) chosen so both prompts tokenize
to the same length; with ``"operands"`` the operator stays and both operands change so the answer differs
(``"6 + 2 ="``; Wang et al. 2023's ABC-style counterfactual, so paths from operand A and from operand B
can be found); it also stores ``counterfactual``, ``cf_a``, ``cf_b``, ``cf_answer``, ``cf_answer_tokens``.

Few-shot prefix (small models need it), shared by reference and counterfactual so they stay aligned. With
``fewshot_operations="every"`` (default) it has as many examples as the query's operation lists and at least
one per operation, taken in turn from every operation of the set, each in its operation's matching template
(same form and place in the file: ``add_eq_1`` ↔ ``mul_eq_1``): "2 + 4 = 6", "9 - 4 = 5", "2 * 3 = 6",
"8 / 2 = 4" — every operation shown, the same whatever the query's operation. ``"neutral"`` (earlier runs)
stops at the paper's three shots, so it never showed division. ``"mixed"`` interleaves every example of every operation
(about four times longer). After a prefix of additions the query's operator is redundant, after a neutral
or mixed one it is necessary, so the operator counterfactual measures what the operator token does rather
than what the prefix already says (with ``"same"``, the paper's, ``'2 + 4 = 6 ... 6 $ 5 = '``
still names the operation). A set with one operation (word problems, exponentiation) has nothing to mix.

Multi-token answers: tokenizers that split numbers into digits (Llama, SmolLM2) make "12" two tokens. The
target of patching is the answer's *first* token (``answer_token``); ``answer_tokens`` keeps the whole
answer and the correctness filter checks every token. ``multi_token_answers="refuse"`` keeps single-token
answers only.

Start of text: a prompt begins as the tokenizer begins any text (:func:`prompt_start`). Tokenizers that add
a BOS token by default (Gemma, Llama) get it in the prompt's *text* (``"<bos>2 + 4 = 6\\n..."``), so every
later tokenization keeps it; Gemma 3 270M answers few-shot arithmetic near chance without it (8% vs 83% on
``add_eq_1``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Collection
from dataclasses import asdict, dataclass
from typing import Literal, TypeAlias

from mathcircuits._codec import Encoded
from mathcircuits._errors import FixableTypeError
from mathcircuits._schema import check_fields, expect, kind_of, setting
from mathcircuits._schema import from_dict as config_from_dict
from mathcircuits.data.mib_kinds import MIB_KINDS, mib_cf_operands
from mathcircuits.data.operands import PairError, compute_answer
from mathcircuits.data.pairs import PairRow
from mathcircuits.data.pairset import PairSet
from mathcircuits.data.render import FewshotOperations, aligned_vocab, answer_spacing, render_pair
from mathcircuits.data.templates import OPERATIONS, Operation, TemplateSet
from mathcircuits.data.tokenizer_id import Tokenizer, tokenizer_fingerprint

__all__ = [
    "GenerationConfig",
    "generate_pairs",
]

log = logging.getLogger(__name__)

#: The counterfactual prompt of a pair: the operator swapped (the paper's), other operands and another answer, or
#: one of MIB's operand kinds (:mod:`.mib_kinds`: which digits change).
Counterfactual: TypeAlias = Literal[
    "operator", "operands", "random_counterfactual", "ones_op1", "ones_op2", "tens_op1", "tens_op2", "ones_carry"
]


@dataclass(frozen=True)
class GenerationConfig:
    """How to build prompt pairs. Every field has a visible default, a type and a range (checked when built)."""

    operations: tuple[Operation, ...] = setting(("add",), "operations to build pairs for (add, sub, mul, div, pow)")
    template_ids: tuple[str, ...] | None = setting(None, "template ids to use; null: every template of the operations")
    n_per_template: int = setting(16, "pairs drawn per template", ge=1)
    operand_range: tuple[int, int] = setting(
        (1, 9), "inclusive operand range [low, high]; for div: divisor and quotient"
    )
    fewshot: bool = setting(True, "prefix the query with the template's few-shot examples")
    fewshot_operations: FewshotOperations = setting(
        "every",
        "every: one example of each operation of the template set in turn (at least as many as the paper's), the "
        "same prefix for every query, so the prefix does not name the query's operation and its operator is needed "
        "to answer; neutral: the same cut at the paper's number of examples (division not shown); mixed: every "
        "example of every operation, interleaved (about 4x longer); same: the query's operation only (the paper's)",
    )
    allow_negative: bool = setting(False, "keep pairs whose answer is negative")
    integer_only: bool = setting(True, "keep only integer answers (division)")
    multi_token_answers: Literal["first", "refuse"] = setting(
        "first", "first: target an answer's first token; refuse: skip multi-token answers"
    )
    counterfactual: Counterfactual = setting(
        "operator",
        "operator: the operator replaced by a non-arithmetic word; operands: other operands, another answer",
    )
    seed: int = setting(0, "random seed of operands and word pools")

    def __post_init__(self) -> None:
        ops = self.operations if isinstance(self.operations, (list, tuple)) else ()
        for op in ops:  # before the field check, which would only say "not one of": name the operation
            if isinstance(op, str) and op not in OPERATIONS:
                raise PairError(f"operation {op!r} is unknown. ", f"use some of {OPERATIONS}.")
        check_fields(self)
        lo, hi = self.operand_range
        if lo > hi or lo < 0:
            raise PairError(
                f"operand_range {self.operand_range} is invalid. ", "give (low, high) with 0 <= low <= high."
            )
        empty = [op for op in self.operations if not operand_pairs(op, self)]
        if empty:
            raise PairError(
                f"operand_range {list(self.operand_range)} gives no valid operand pair for {empty} "
                f"(allow_negative={self.allow_negative}, integer_only={self.integer_only}). ",
                "widen operand_range, or allow negative or non-integer answers.",
            )

    def to_dict(self) -> Encoded:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Encoded) -> "GenerationConfig":
        """Build from a mapping (lists are accepted for tuples); unknown keys are an error."""
        return config_from_dict(cls, d)


def operand_pairs(op: Operation, cfg: GenerationConfig) -> list[tuple[int, int, str]]:
    """Every ``(a, b, answer)`` of operation ``op`` that ``cfg``'s operand range and answer rules allow.

    In a fixed order; for division, divisor and quotient are in range.
    """
    lo, hi = cfg.operand_range
    out = []
    if op == "div" and cfg.integer_only:
        # divisor and quotient in range, dividend = divisor * quotient (as in the paper's single-digit division)
        for b in range(max(lo, 1), hi + 1):
            for c in range(lo, hi + 1):
                out.append((b * c, b, str(c)))
        return out
    for a in range(lo, hi + 1):
        for b in range(lo, hi + 1):
            ans = compute_answer(op, a, b, cfg.integer_only, cfg.allow_negative)
            if ans is not None:
                out.append((a, b, ans))
    return out


def generate_pairs(
    tokenizer: Tokenizer,
    template_sets: list[TemplateSet],
    config: GenerationConfig = GenerationConfig(),
    facts: Collection[tuple[str, int, int]] | None = None,
) -> PairSet:
    """Token-aligned reference/counterfactual prompt pairs from templates.

    Args:
        facts: draw operands only from these ``(operation, a, b)`` facts (None: every fact of the operand range);
            see :mod:`mathcircuits.data.facts` for splits that share no fact.

    Returns:
        One row per pair: ``prompt``, ``cf_prompt``, ``tokens``, ``cf_tokens``, ``answer``, ``answer_token``,
        ``answer_tokens``, the positions ``pos_a``, ``pos_b``, ``pos_op``, ``pos_last`` and the pair's
        operation, template and operands.

    Raises:
        PairError: no template matches, an unknown template id, no counterfactual word aligns,
            or a template gives no usable pair (the message says which and how to fix it).
    """

    if not callable(tokenizer) or not hasattr(tokenizer, "convert_ids_to_tokens"):
        raise FixableTypeError(
            f"generate_pairs: tokenizer must be a Hugging Face tokenizer, got {kind_of(tokenizer)}. ",
            "pass model.tokenizer (e.g. generate_pairs(model.tokenizer, load_templates(), config)).",
        )
    expect(
        "generate_pairs", "template_sets", template_sets, (list, tuple), "a list of TemplateSet",
        "pass load_templates()",
    )  # fmt: skip
    if not all(isinstance(s, TemplateSet) for s in template_sets):
        raise FixableTypeError(
            f"generate_pairs: template_sets must hold TemplateSet values, got {kind_of(template_sets)}. ",
            "pass load_templates() (or load_template_file(path) in a list).",
        )
    expect("generate_pairs", "config", config, GenerationConfig, "a GenerationConfig", "pass GenerationConfig(...)")
    rng = random.Random(config.seed)
    spacing = answer_spacing(tokenizer)
    chosen = [(s, t) for s in template_sets for t in s.templates if t.operation in config.operations]
    if config.template_ids is not None:
        known = {t.id for _, t in chosen}
        missing = [i for i in config.template_ids if i not in known]
        if missing:
            raise PairError(
                f"template ids {missing} are not among the loaded templates of operations {config.operations}. ",
                f"choose from {sorted(known)}.",
            )
        chosen = [(s, t) for s, t in chosen if t.id in config.template_ids]
    if not chosen:
        raise PairError(f"no template matches operations {config.operations}. ", "load a template set that has them.")
    records: list[PairRow] = []
    for tset, tpl in chosen:
        candidates = operand_pairs(tpl.operation, config)
        if facts is not None:
            allowed = facts if isinstance(facts, (set, frozenset)) else set(facts)
            candidates = [(a, b, ans) for a, b, ans in candidates if (tpl.operation, a, b) in allowed]
            if not candidates:
                raise PairError(
                    f"template {tpl.id!r}: none of the given facts is a {tpl.operation} fact of operand_range "
                    f"{list(config.operand_range)}. ",
                    "pass facts of this operation and range (split_facts).",
                )
        vocab = list(tset.counterfactual_vocab[tpl.cf_vocab])
        aligned = aligned_vocab(tokenizer, tpl, vocab)
        if not aligned:
            raise PairError(
                f"template {tpl.id!r}: no word of counterfactual vocabulary {tpl.cf_vocab!r} tokenizes to as many "
                f"tokens as {tpl.op!r} "
                f"with this tokenizer. ",
                f"add such words to {tset.path}.",
            )
        order = rng.sample(candidates, len(candidates))
        made = 0
        i = 0
        last_error: Exception | str = "every pair was filtered out"
        while made < config.n_per_template and i < 20 * config.n_per_template:
            a, b, ans = order[i % len(order)]
            i += 1
            words = {p: rng.choice(tset.word_pools[p]) for p in tpl.pools}
            if i > len(order) and not tpl.pools:
                break  # every operand pair used once and nothing else varies
            cf_operands = None
            if config.counterfactual == "operands":  # other operands (both differ), another answer
                others = [(x, y) for x, y, z in candidates if x != a and y != b and z != ans]
                if not others:
                    last_error = f"no operand pair differs from ({a}, {b}) in both operands and the answer"
                    continue
                cf_operands = rng.choice(others)
            elif config.counterfactual in MIB_KINDS:
                cf_operands = mib_cf_operands(config.counterfactual, tpl.operation, a, b, ans, candidates, rng)
                if cf_operands is None:
                    last_error = f"no {config.counterfactual} counterfactual of ({a}, {b}) in operand_range"
                    continue
            try:
                rec = render_pair(
                    tokenizer,
                    tset,
                    tpl,
                    a,
                    b,
                    ans,
                    rng.choice(aligned),
                    words,
                    config.fewshot,
                    spacing,
                    config.integer_only,
                    config.allow_negative,
                    cf_operands,
                    config.fewshot_operations,
                )
            except PairError as err:  # e.g. a pool word that changes the token count; try another draw
                last_error = err
                continue
            if len(rec["answer_tokens"]) > 1 and config.multi_token_answers == "refuse":
                continue
            if config.counterfactual in MIB_KINDS:
                rec["counterfactual"] = config.counterfactual
            records.append(rec)
            made += 1
        if 0 < made < config.n_per_template:  # a note, never a silent cap: the stages also list it in summaries
            log.warning(
                "template %s gave %d of the %d pairs asked for (operand_range %s holds no more distinct ones)",
                tpl.id, made, config.n_per_template, list(config.operand_range),
            )  # fmt: skip
        if made == 0:
            raise PairError(
                f"template {tpl.id!r} gave no usable pair ({last_error}). ",
                "widen operand_range or allow multi-token answers.",
            )
    fp = tokenizer_fingerprint(tokenizer)
    for i, rec in enumerate(records):
        rec["pair_id"] = i
        rec["words"] = [f"{k}={v}" for k, v in rec["words"].items()]
        rec["tokenizer"] = fp
    return PairSet.from_rows(records)
