"""Reference / counterfactual prompt pairs from templates (Zhang et al. 2024, §3.1).

For each template we draw operands (seeded), fill word pools, and build

* the reference prompt, e.g. ``"3 + 5 ="``, whose answer is ``8``;
* the counterfactual prompt, identical except that the operator ``{OP}`` is
  replaced by a word of the template's counterfactual vocabulary
  (``"3 < 5 ="``), chosen so that both prompts tokenize to the same length
  (``counterfactual="operator"``, the paper's); or, with
  ``counterfactual="operands"``, the same operator with other operands whose
  answer differs (``"6 + 2 ="``: both operands change, so paths from operand A
  and from operand B can be found; Wang et al. 2023's ABC-style counterfactual).
  The operand counterfactual stores ``counterfactual`` (``"operands"``), ``cf_a``,
  ``cf_b``, ``cf_answer`` and ``cf_answer_tokens`` too.

An optional few-shot prefix, built from the same template with the operand
pairs listed in the template file, precedes the query (small models need it).
With ``fewshot_operations="mixed"`` the prefix holds the examples of every operation of the
template's set, each in its own operation's matching template (same form, same place in the
file: ``add_eq_1`` ↔ ``mul_eq_1``), interleaved ("2 + 4 = 6", "9 - 4 = 5", "2 * 3 = 6", ...):
after a prefix of additions the query's operator is redundant, after a mixed one it is necessary,
so the operator counterfactual measures what the operator token does rather than what the
prefix already says. Reference and counterfactual share the prefix, so they stay token-aligned.
Each record also stores the token positions of operand A, operand B, the
operator and the last token, and the answer's token ids.

Multi-token answers: tokenizers that split numbers into digits (Llama,
SmolLM2) make "12" two tokens. The target of patching is the answer's *first*
token (``answer_token``); the whole answer is kept in ``answer_tokens`` and
the correctness filter checks every token (teacher-forced greedy decoding).
Set ``multi_token_answers="refuse"`` to keep single-token answers only.

Start of text: a prompt begins as the model's tokenizer begins any text
(:func:`prompt_start`). Tokenizers that add a BOS token by default (Gemma, Llama)
get it at the front of the prompt's *text* (``"<bos>2 + 4 = 6\n..."``), so every
later tokenization of the prompt (fine-tuning data, probes) keeps it; a base
model like Gemma 3 270M answers few-shot arithmetic near chance without it
(8% vs 83% on ``add_eq_1``). Tokenizers that add nothing (SmolLM2, GPT-2) give
the same prompts as before.
"""

from __future__ import annotations

import random
import string
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any, Literal, TypeAlias

import datasets

from mathcircuits._schema import check_fields, setting
from mathcircuits._schema import from_dict as config_from_dict
from mathcircuits.data.mib_kinds import MIB_KINDS, mib_cf_operands
from mathcircuits.data.templates import OPERATIONS, Template, TemplateSet

__all__ = [
    "Counterfactual",
    "FewshotOperations",
    "GenerationConfig",
    "PairError",
    "answer_spacing",
    "compute_answer",
    "generate_pairs",
    "operand_pairs",
    "prompt_start",
    "render_pair",
]

#: The counterfactual prompt of a pair: the operator swapped (the paper's), other operands and another answer, or
#: one of MIB's operand kinds (:mod:`.mib_kinds`: which digits change).
Counterfactual: TypeAlias = Literal[
    "operator", "operands", "random_counterfactual", "ones_op1", "ones_op2", "tens_op1", "tens_op2", "ones_carry"
]
#: Which operations the few-shot examples show: the query's own (the paper's), or every operation of the set.
FewshotOperations: TypeAlias = Literal["same", "mixed"]


class PairError(ValueError):
    """A prompt pair cannot be built as asked; the message says why and how to fix it."""


@dataclass(frozen=True)
class GenerationConfig:
    """How to build prompt pairs. Every field has a visible default, a type and a range (checked when built)."""

    operations: tuple[str, ...] = setting(("add",), "operations to build pairs for (add, sub, mul, div, pow)")
    template_ids: tuple[str, ...] | None = setting(None, "template ids to use; null: every template of the operations")
    n_per_template: int = setting(16, "pairs drawn per template", ge=1)
    operand_range: tuple[int, int] = setting(
        (1, 9), "inclusive operand range [low, high]; for div: divisor and quotient"
    )
    fewshot: bool = setting(True, "prefix the query with the template's few-shot examples")
    fewshot_operations: FewshotOperations = setting(
        "same",
        "same: the examples use the query's operation (the paper's); mixed: the examples of every operation of "
        "the template set, interleaved, so the query's operator is needed to answer",
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
        check_fields(self)
        for op in self.operations:
            if op not in OPERATIONS:
                raise PairError(f"operation {op!r} is unknown. Fix: use some of {OPERATIONS}.")
        lo, hi = self.operand_range
        if lo > hi or lo < 0:
            raise PairError(
                f"operand_range {self.operand_range} is invalid. Fix: give (low, high) with 0 <= low <= high."
            )
        empty = [op for op in self.operations if not operand_pairs(op, self)]
        if empty:
            raise PairError(
                f"operand_range {list(self.operand_range)} gives no valid operand pair for {empty} "
                f"(allow_negative={self.allow_negative}, integer_only={self.integer_only}). "
                "Fix: widen operand_range, or allow negative or non-integer answers."
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GenerationConfig":
        """Build from a mapping (lists are accepted for tuples); unknown keys are an error."""
        return config_from_dict(cls, d)


def compute_answer(
    operation: str, a: int, b: int, integer_only: bool = True, allow_negative: bool = False
) -> str | None:
    """The answer string for ``a <op> b``, or None when the rule excludes the pair.

    Args:
        operation: one of :data:`OPERATIONS`.
        a: the first operand.
        b: the second operand.
        integer_only: exclude divisions with a remainder (else two decimals).
        allow_negative: keep negative results.

    Returns:
        The answer as text (e.g. ``"8"``, ``"2.5"``), or None for an excluded pair.

    Raises:
        PairError: an unknown operation.
    """
    if operation == "add":
        value: Fraction | int = a + b
    elif operation == "sub":
        value = a - b
    elif operation == "mul":
        value = a * b
    elif operation == "div":
        if b == 0:
            return None
        value = Fraction(a, b)
    elif operation == "pow":
        value = a**b
    else:
        raise PairError(f"operation {operation!r} is unknown. Fix: use one of {OPERATIONS}.")
    if value < 0 and not allow_negative:
        return None
    if isinstance(value, Fraction):
        if value.denominator == 1:
            return str(value.numerator)
        if integer_only:
            return None
        return f"{float(value):.2f}".rstrip("0")
    return str(value)


def answer_spacing(tokenizer) -> str:
    """Where the space before the answer goes for this tokenizer.

    Args:
        tokenizer: an HF tokenizer.

    Returns:
        ``"prompt"``: the prompt ends with a space and the answer is bare digits (tokenizers that
        split digits, e.g. SmolLM2: ``"= "`` then ``"8"``); ``"answer"``: the answer carries the
        space (GPT-2: ``" 8"`` is one token).
    """
    for digit in "0123456789":
        base = tokenizer("x =", add_special_tokens=False)["input_ids"]
        joined = tokenizer("x = " + digit, add_special_tokens=False)["input_ids"]
        if len(joined) != len(base) + 1 or joined[: len(base)] != base:
            return "prompt"
    return "answer"


def prompt_start(tokenizer) -> str:
    """The special tokens this tokenizer puts before any text by default, as text (``"<bos>"`` or ``""``).

    Prompts are tokenized with ``add_special_tokens=False`` throughout (so a prompt and its counterfactual
    align token by token); prompts that begin with this text start as the model saw text in training.

    Args:
        tokenizer: an HF tokenizer.

    Returns:
        The text of the leading special tokens (``""`` when the tokenizer adds none, e.g. SmolLM2, GPT-2).

    Raises:
        PairError: the leading tokens do not survive a round trip through text (the tokenizer splits
            special tokens), so prompts cannot carry them.
    """
    bare = tokenizer("7", add_special_tokens=False)["input_ids"]
    full = tokenizer("7", add_special_tokens=True)["input_ids"]
    if len(full) <= len(bare) or full[len(full) - len(bare) :] != bare:
        return ""
    lead = full[: len(full) - len(bare)]
    text = "".join(tokenizer.convert_ids_to_tokens(lead))
    if tokenizer(text + "7", add_special_tokens=False)["input_ids"] != full:
        raise PairError(
            f"the tokenizer starts every text with {lead} but does not read {text!r} back as those tokens. "
            "Fix: load the tokenizer with split_special_tokens=False."
        )
    return text


@dataclass
class _Rendered:
    text: str
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)


def _render(tpl: Template, a: int, b: int, op_text: str, words: dict[str, str]) -> _Rendered:
    out = _Rendered("")
    for literal, name, _, _ in string.Formatter().parse(tpl.text):
        out.text += literal
        if name is None:
            continue
        value = {"A": str(a), "B": str(b), "OP": op_text}.get(name, words.get(name))
        start = len(out.text)
        out.text += value  # type: ignore[operator]
        if name in ("A", "B", "OP"):
            out.spans[name] = (start, len(out.text))
    return out


def _token_positions(offsets: list[tuple[int, int]], span: tuple[int, int]) -> list[int]:
    lo, hi = span
    return [i for i, (s, e) in enumerate(offsets) if e > lo and s < hi and e > s]


def render_pair(
    tokenizer,
    template: TemplateSet | None,
    tpl: Template,
    a: int,
    b: int,
    answer: str,
    cf_word: str,
    words: dict[str, str],
    fewshot: bool,
    spacing: str,
    integer_only: bool = True,
    allow_negative: bool = False,
    cf_operands: tuple[int, int] | None = None,
    fewshot_operations: FewshotOperations = "same",
) -> dict[str, Any]:
    """Build one reference/counterfactual record from a template and operands.

    Args:
        tokenizer: the model's tokenizer.
        template: the template's set (for its few-shot examples and separator), or None without few-shot.
        tpl: the template.
        a: the first operand.
        b: the second operand.
        answer: the answer text (from :func:`compute_answer`).
        cf_word: the word that replaces the operator in the counterfactual.
        words: the words that fill the template's pools.
        fewshot: put the set's few-shot examples before the query.
        spacing: :func:`answer_spacing` of the tokenizer.
        integer_only: the answer rule of the few-shot examples.
        allow_negative: the answer rule of the few-shot examples.
        cf_operands: ``(a', b')`` for an operand counterfactual (the operator stays, ``cf_word`` is ignored);
            None: the operator counterfactual (``cf_word`` replaces the operator).
        fewshot_operations: ``"same"``: the examples of the query's operation; ``"mixed"``: those of every
            operation of the set, each in its matching template (see the module docstring).

    Returns:
        A dict with the prompts, their token ids, the answer's token ids and the token positions
        of operand A, operand B, the operator and the last token (the columns of :func:`generate_pairs`).

    Raises:
        PairError: the two prompts differ in token length, the answer merges with the prompt's
            last token, or the few-shot examples are missing or invalid.
    """
    prefix = prompt_start(tokenizer)
    if fewshot and template is not None:
        examples = template.fewshot_examples.get(tpl.operation, ())
        if not examples:
            raise PairError(
                f"template set {template.name!r} has no few-shot examples for {tpl.operation!r}. "
                f"Fix: add fewshot.examples.{tpl.operation} to {template.path}, or generate with fewshot=False."
            )
        shots = []
        for shot, x, y in _shots(template, tpl, words, fewshot_operations):
            ans = compute_answer(shot.operation, x, y, integer_only, allow_negative)
            if ans is None:
                raise PairError(
                    f"few-shot example {x}, {y} of {template.path} has no valid {shot.operation} answer. "
                    "Fix: change it."
                )
            shots.append(_render(shot, x, y, shot.op, words).text + " " + ans)
        prefix += template.fewshot_separator.join(shots) + template.fewshot_separator
    tail = " " if spacing == "prompt" else ""
    ref = _render(tpl, a, b, tpl.op, words)
    cf = _render(tpl, a, b, cf_word, words) if cf_operands is None else _render(tpl, *cf_operands, tpl.op, words)
    prompt, cf_prompt = prefix + ref.text + tail, prefix + cf.text + tail
    enc = tokenizer(prompt, add_special_tokens=False, return_offsets_mapping=True)
    cf_ids = tokenizer(cf_prompt, add_special_tokens=False)["input_ids"]
    ids = enc["input_ids"]
    if len(ids) != len(cf_ids):
        raise PairError(
            f"template {tpl.id!r}: reference {prompt[-40:]!r} has {len(ids)} tokens but counterfactual "
            f"{cf_prompt[-40:]!r} has {len(cf_ids)}. Fix: use counterfactual words that tokenize like {tpl.op!r}."
        )
    answer_text = answer if spacing == "prompt" else " " + answer
    full = tokenizer(prompt + answer_text, add_special_tokens=False)["input_ids"]
    if full[: len(ids)] != ids:
        raise PairError(
            f"template {tpl.id!r}: the answer {answer!r} merges with the prompt's last token. "
            "Fix: end the template with a separator such as '=' or ':'."
        )
    answer_ids = full[len(ids) :]
    extra: dict[str, Any] = {}
    if cf_operands is not None:
        cf_answer = compute_answer(tpl.operation, *cf_operands, integer_only, allow_negative)
        if cf_answer is None or cf_answer == answer:
            raise PairError(
                f"operands {cf_operands} give no valid {tpl.operation} answer different from {answer!r}. "
                "Fix: draw other counterfactual operands."
            )
        cf_full = tokenizer(
            cf_prompt + (cf_answer if spacing == "prompt" else " " + cf_answer), add_special_tokens=False
        )
        extra = {
            "counterfactual": "operands",
            "cf_a": cf_operands[0],
            "cf_b": cf_operands[1],
            "cf_answer": cf_answer,
            "cf_answer_tokens": cf_full["input_ids"][len(cf_ids) :],
        }
    shift = len(prefix)
    offsets = [(s, e) for s, e in enc["offset_mapping"]]
    pos = {k: _token_positions(offsets, (s + shift, e + shift)) for k, (s, e) in ref.spans.items()}
    return {
        "prompt": prompt,
        "cf_prompt": cf_prompt,
        "answer": answer,
        "answer_token": answer_ids[0],
        "answer_tokens": answer_ids,
        "n_answer_tokens": len(answer_ids),
        "operation": tpl.operation,
        "template_id": tpl.id,
        "template_set": tpl.set_name,
        "form": tpl.form,
        "a": a,
        "b": b,
        "cf_word": cf_word,
        "words": dict(words),
        "tokens": ids,
        "cf_tokens": cf_ids,
        "n_tokens": len(ids),
        "prefix_len": len(tokenizer(prefix, add_special_tokens=False)["input_ids"]) if prefix else 0,
        "pos_a": pos["A"],
        "pos_b": pos["B"],
        "pos_op": pos["OP"],
        "pos_last": len(ids) - 1,
        **extra,
    }


def _shots(
    template: TemplateSet, tpl: Template, words: dict[str, str], fewshot_operations: FewshotOperations
) -> list[tuple[Template, int, int]]:
    """The few-shot examples as ``(template, a, b)``: the query's template only, or every operation's match."""
    if fewshot_operations == "same":
        return [(tpl, x, y) for x, y in template.fewshot_examples[tpl.operation]]
    if fewshot_operations != "mixed":
        raise PairError(f"fewshot_operations {fewshot_operations!r} is unknown. Fix: use 'same' or 'mixed'.")

    def rank(t: Template) -> int:  # the template's place among its operation's templates of its form
        return [u.id for u in template.templates if (u.operation, u.form) == (t.operation, t.form)].index(t.id)

    matches = []
    for op in template.fewshot_examples:
        same_form = [u for u in template.templates if (u.operation, u.form) == (op, tpl.form)]
        if op == tpl.operation:
            matches.append(tpl)
        elif len(same_form) > rank(tpl) and set(same_form[rank(tpl)].pools) <= set(words):
            matches.append(same_form[rank(tpl)])
    if len(matches) < 2:
        raise PairError(
            f"template {tpl.id!r}: the set {template.name!r} has no template of another operation in the form "
            f"{tpl.form!r} with few-shot examples, so a mixed prefix cannot be built. "
            "Fix: use fewshot_operations='same', or add such templates and examples to the set."
        )
    longest = max(len(template.fewshot_examples[t.operation]) for t in matches)
    return [
        (t, *template.fewshot_examples[t.operation][i])
        for i in range(longest)
        for t in matches
        if i < len(template.fewshot_examples[t.operation])
    ]


def operand_pairs(op: str, cfg: GenerationConfig) -> list[tuple[int, int, str]]:
    """Every ``(a, b, answer)`` of operation ``op`` that ``cfg``'s operand range and answer rules allow.

    Args:
        op: one of :data:`OPERATIONS`.
        cfg: the generation settings (``operand_range``, ``integer_only``, ``allow_negative``).

    Returns:
        The operand pairs with their answers, in a fixed order (division: divisor and quotient in range).
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
    tokenizer,
    template_sets: list[TemplateSet],
    config: GenerationConfig = GenerationConfig(),
    facts: Collection[tuple[str, int, int]] | None = None,
):
    """Token-aligned reference/counterfactual prompt pairs from templates.

    Args:
        tokenizer: the model's tokenizer.
        template_sets: template sets from :func:`load_templates`.
        config: which operations, templates, operands and how many pairs (seeded).
        facts: draw operands only from these ``(operation, a, b)`` facts (None: every fact of the operand range);
            see :mod:`mathcircuits.data.facts` for splits that share no fact.

    Returns:
        A ``datasets.Dataset`` with one row per pair: ``prompt``, ``cf_prompt``, ``tokens``,
        ``cf_tokens``, ``answer``, ``answer_token``, ``answer_tokens``, the positions ``pos_a``,
        ``pos_b``, ``pos_op``, ``pos_last`` and the pair's operation, template and operands.

    Raises:
        PairError: no template matches, an unknown template id, no counterfactual word aligns,
            or a template gives no usable pair (the message says which and how to fix it).
    """

    rng = random.Random(config.seed)
    spacing = answer_spacing(tokenizer)
    chosen = [(s, t) for s in template_sets for t in s.templates if t.operation in config.operations]
    if config.template_ids is not None:
        known = {t.id for _, t in chosen}
        missing = [i for i in config.template_ids if i not in known]
        if missing:
            raise PairError(
                f"template ids {missing} are not among the loaded templates of operations {config.operations}. "
                f"Fix: choose from {sorted(known)}."
            )
        chosen = [(s, t) for s, t in chosen if t.id in config.template_ids]
    if not chosen:
        raise PairError(f"no template matches operations {config.operations}. Fix: load a template set that has them.")
    records: list[dict[str, Any]] = []
    for tset, tpl in chosen:
        candidates = operand_pairs(tpl.operation, config)
        if facts is not None:
            allowed = facts if isinstance(facts, (set, frozenset)) else set(facts)
            candidates = [(a, b, ans) for a, b, ans in candidates if (tpl.operation, a, b) in allowed]
            if not candidates:
                raise PairError(
                    f"template {tpl.id!r}: none of the given facts is a {tpl.operation} fact of operand_range "
                    f"{list(config.operand_range)}. Fix: pass facts of this operation and range (split_facts)."
                )
        vocab = list(tset.counterfactual_vocab[tpl.cf_vocab])
        aligned = _aligned_vocab(tokenizer, tpl, vocab)
        if not aligned:
            raise PairError(
                f"template {tpl.id!r}: no word of counterfactual vocabulary {tpl.cf_vocab!r} tokenizes to as many "
                f"tokens as {tpl.op!r} "
                f"with this tokenizer. Fix: add such words to {tset.path}."
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
        if made == 0:
            raise PairError(
                f"template {tpl.id!r} gave no usable pair ({last_error}). "
                "Fix: widen operand_range or allow multi-token answers."
            )
    for i, rec in enumerate(records):
        rec["pair_id"] = i
        rec["words"] = [f"{k}={v}" for k, v in rec["words"].items()]
    return datasets.Dataset.from_list(records)


def _aligned_vocab(tokenizer, tpl: Template, vocab: list[str]) -> list[str]:
    """Counterfactual words whose rendered query has the reference's token length."""
    ref = _render(tpl, 1, 2, tpl.op, {p: "x" for p in tpl.pools}).text
    n = len(tokenizer(ref, add_special_tokens=False)["input_ids"])
    good = []
    for w in vocab:
        cf = _render(tpl, 1, 2, w, {p: "x" for p in tpl.pools}).text
        if len(tokenizer(cf, add_special_tokens=False)["input_ids"]) == n:
            good.append(w)
    return good
