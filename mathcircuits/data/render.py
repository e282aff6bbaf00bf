"""One reference/counterfactual record from a template and operands: the prompt's start, its few-shot prefix,
the answer's spacing and token ids, and the token positions of the operands and the operator.

How the prefix is chosen (``fewshot_operations``) and why a prompt starts as the tokenizer starts any text: the
docstring of :mod:`.generate`.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from mathcircuits.data.operands import PairError, compute_answer
from mathcircuits.data.pairs import PairRow
from mathcircuits.data.templates import Template, TemplateSet
from mathcircuits.data.tokenizer_id import Tokenizer

__all__ = [
    "prompt_start",
]

#: Which operations the few-shot examples show: every operation of the set in turn, each at least once (the
#: default: the prefix does not name the query's operation), the same with as many shots as the query's operation
#: lists (three: division never shown; earlier runs), every example of every operation, or the query's own (the
#: paper's).
FewshotOperations: TypeAlias = Literal["same", "every", "neutral", "mixed"]


def answer_spacing(tokenizer) -> str:
    """Where the space before the answer goes for this tokenizer.

    ``"prompt"``: the prompt ends with a space and the answer is bare digits (tokenizers that split digits,
    e.g. SmolLM2: ``"= "`` then ``"8"``); ``"answer"``: the answer carries the space (GPT-2: ``" 8"`` is one token).
    """
    for digit in "0123456789":
        base = tokenizer("x =", add_special_tokens=False)["input_ids"]
        joined = tokenizer("x = " + digit, add_special_tokens=False)["input_ids"]
        if len(joined) != len(base) + 1 or joined[: len(base)] != base:
            return "prompt"
    return "answer"


def prompt_start(tokenizer: Tokenizer) -> str:
    """The special tokens this tokenizer puts before any text by default, as text (``"<bos>"`` or ``""``).

    Prompts are tokenized with ``add_special_tokens=False`` throughout (so a prompt and its counterfactual
    align token by token); prompts that begin with this text start as the model saw text in training.
    PairError when the leading tokens do not survive a round trip through text.
    """
    bare = tokenizer("7", add_special_tokens=False)["input_ids"]
    full = tokenizer("7", add_special_tokens=True)["input_ids"]
    if len(full) <= len(bare) or full[len(full) - len(bare) :] != bare:
        return ""
    lead = full[: len(full) - len(bare)]
    text = "".join(tokenizer.convert_ids_to_tokens(lead))
    if tokenizer(text + "7", add_special_tokens=False)["input_ids"] != full:
        raise PairError(
            f"the tokenizer starts every text with {lead} but does not read {text!r} back as those tokens. ",
            "load the tokenizer with split_special_tokens=False.",
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
    fewshot_operations: FewshotOperations = "every",
) -> PairRow:
    """Build one reference/counterfactual record from a template and operands.

    Args:
        template: the template's set (its few-shot examples and separator), or None without few-shot.
        answer: from :func:`compute_answer`.
        cf_word: replaces the operator in the counterfactual.
        spacing: :func:`answer_spacing` of the tokenizer.
        integer_only: the answer rule of the few-shot examples (as ``allow_negative``).
        cf_operands: ``(a', b')`` for an operand counterfactual (the operator stays, ``cf_word`` is ignored);
            None: the operator counterfactual.
        fewshot_operations: ``"every"``: one example per shot, from every operation of the set in turn, each at
            least once; ``"neutral"``: the same, as many shots as the query's operation lists;
            ``"mixed"``: every example of every operation; each in its matching template (see
            :mod:`.generate`); ``"same"``: those of the query's operation.

    Returns:
        The columns of :func:`generate_pairs`.

    Raises:
        PairError: the two prompts differ in token length, the answer merges with the prompt's
            last token, or the few-shot examples are missing or invalid.
    """
    prefix = prompt_start(tokenizer)
    if fewshot and template is not None:
        examples = template.fewshot_examples.get(tpl.operation, ())
        if not examples:
            raise PairError(
                f"template set {template.name!r} has no few-shot examples for {tpl.operation!r}. ",
                f"add fewshot.examples.{tpl.operation} to {template.path}, or generate with fewshot=False.",
            )
        shots = []
        for shot, x, y in _shots(template, tpl, words, fewshot_operations):
            ans = compute_answer(shot.operation, x, y, integer_only, allow_negative)
            if ans is None:
                raise PairError(
                    f"few-shot example {x}, {y} of {template.path} has no valid {shot.operation} answer. ", "change it."
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
            f"{cf_prompt[-40:]!r} has {len(cf_ids)}. ",
            f"use counterfactual words that tokenize like {tpl.op!r}.",
        )
    answer_text = answer if spacing == "prompt" else " " + answer
    full = tokenizer(prompt + answer_text, add_special_tokens=False)["input_ids"]
    if full[: len(ids)] != ids:
        raise PairError(
            f"template {tpl.id!r}: the answer {answer!r} merges with the prompt's last token. ",
            "end the template with a separator such as '=' or ':'.",
        )
    answer_ids = full[len(ids) :]
    extra: PairRow = {}
    if cf_operands is not None:
        cf_answer = compute_answer(tpl.operation, *cf_operands, integer_only, allow_negative)
        if cf_answer is None or cf_answer == answer:
            raise PairError(
                f"operands {cf_operands} give no valid {tpl.operation} answer different from {answer!r}. ",
                "draw other counterfactual operands.",
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


def render_prompt(
    tokenizer,
    template: TemplateSet | None,
    tpl: Template,
    a: int,
    b: int,
    fewshot: bool,
    spacing: str,
    fewshot_operations: FewshotOperations = "every",
) -> str | None:
    """The reference prompt :func:`render_pair` builds for ``a, b`` with the template's own operator (None: the
    operands have no answer)."""
    answer = compute_answer(tpl.operation, a, b)
    if answer is None:
        return None
    rec = render_pair(tokenizer, template, tpl, a, b, answer, tpl.op, {}, fewshot, spacing,
                      fewshot_operations=fewshot_operations)  # fmt: skip
    return str(rec["prompt"])


def _shots(
    template: TemplateSet, tpl: Template, words: dict[str, str], fewshot_operations: FewshotOperations
) -> list[tuple[Template, int, int]]:
    """The few-shot examples as ``(template, a, b)``: the query's template only, or every operation's match."""
    if fewshot_operations == "same":
        return [(tpl, x, y) for x, y in template.fewshot_examples[tpl.operation]]
    if fewshot_operations not in ("every", "neutral", "mixed"):
        raise PairError(
            f"fewshot_operations {fewshot_operations!r} is unknown. ", "use 'every', 'neutral', 'same' or 'mixed'."
        )

    def rank(t: Template) -> int:  # the template's place among its operation's templates of its form
        return [u.id for u in template.templates if (u.operation, u.form) == (t.operation, t.form)].index(t.id)

    matches = []
    for op in template.fewshot_examples:
        same_form = [u for u in template.templates if (u.operation, u.form) == (op, tpl.form)]
        if op == tpl.operation:
            matches.append(tpl)
        elif len(same_form) > rank(tpl) and set(same_form[rank(tpl)].pools) <= set(words):
            matches.append(same_form[rank(tpl)])
    if len(matches) < 2 and len(template.fewshot_examples) > 1:
        raise PairError(
            f"template {tpl.id!r}: the set {template.name!r} has no template of another operation in the form "
            f"{tpl.form!r} with few-shot examples, so a {fewshot_operations} prefix cannot be built. ",
            "use fewshot_operations='same', or add such templates and examples to the set.",
        )
    if fewshot_operations in ("every", "neutral"):  # the operations in the set's order, whatever the query's
        shots = template.fewshot_examples
        n = len(shots[tpl.operation])
        n = max(n, len(matches)) if fewshot_operations == "every" else n  # "every": division shown too
        turn = [matches[i % len(matches)] for i in range(n)]
        return [(t, *shots[t.operation][i % len(shots[t.operation])]) for i, t in enumerate(turn)]
    longest = max(len(template.fewshot_examples[t.operation]) for t in matches)
    return [
        (t, *template.fewshot_examples[t.operation][i])
        for i in range(longest)
        for t in matches
        if i < len(template.fewshot_examples[t.operation])
    ]


def aligned_vocab(tokenizer, tpl: Template, vocab: list[str]) -> list[str]:
    """Counterfactual words whose rendered query has the reference's token length."""
    ref = _render(tpl, 1, 2, tpl.op, {p: "x" for p in tpl.pools}).text
    n = len(tokenizer(ref, add_special_tokens=False)["input_ids"])
    good = []
    for w in vocab:
        cf = _render(tpl, 1, 2, w, {p: "x" for p in tpl.pools}).text
        if len(tokenizer(cf, add_special_tokens=False)["input_ids"]) == n:
            good.append(w)
    return good
