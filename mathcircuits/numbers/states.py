"""Number states: the residual stream at a number's last token, at every depth, in several contexts.

Following Kantamneni & Tegmark (2025) and Fu et al. (2026), a number is read where it is written: the prompt is a
*context* (the few-shot prefix of an arithmetic template and its text up to the first operand, e.g.
``"2 + 4 = 6\\n7 + 1 = 8\\n5 + 3 = 8\\nCalculate: "``) followed by ``n``:
``states[c, n, d] = resid_after_d_blocks(context_c + str(n))[-1]``, ``d = 0 … L`` (0: the token embedding).
Several contexts give several samples of a number, which the probes need (they hold out whole contexts).

Example::

    contexts = number_contexts(model.tokenizer, load_templates(), ("add", "sub"), n=4)
    st = number_states(model, range(100), contexts)     # st.states: [context, number, depth, d_model]

References: Kantamneni & Tegmark, "Language Models Use Trigonometry to Do Addition" (2025), §3;
Fu et al., "Convergent evolution of number representations" (2026).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits._files import JSONObject
from mathcircuits._io import SavedResult
from mathcircuits.data import Operation
from mathcircuits.data.render import answer_spacing, render_prompt
from mathcircuits.data.templates import TemplateSet
from mathcircuits.data.tokenizer_id import Tokenizer
from mathcircuits.models import HookedModel, ModelSpec, PrefixCaches, hooks
from mathcircuits.models.spec import as_spec
from mathcircuits.numbers.reading import Tokenization, depth_labels, number_reading, number_token_counts

__all__ = ["NumberStates", "number_contexts", "number_states"]


def _context_of(tokenizer: Any, tset: TemplateSet, tpl: Any, fewshot: bool, spacing: str) -> str | None:
    """The template's few-shot prefix and its text up to ``{A}`` (None when the template does not fit)."""
    before, sep, _ = tpl.text.partition("{A}")
    if not sep or "{" in before or tpl.pools:
        return None
    # a context to read numbers in, not a counterfactual: the query's own operation's examples (the ``same`` prefix)
    prompt = render_prompt(tokenizer, tset, tpl, 2, 1, fewshot, spacing, fewshot_operations="same")
    query = tpl.text.format(A=2, B=1, OP=tpl.op) + (" " if spacing == "prompt" else "")
    if prompt is None or not prompt.endswith(query):
        return None
    return prompt[: len(prompt) - len(query)] + before


def number_contexts(
    tokenizer: Tokenizer,
    template_sets: Sequence[TemplateSet],
    operations: Sequence[Operation] = ("add", "sub", "mul", "div"),
    n: int = 8,
    first: str | None = None,
    fewshot: bool = True,
) -> tuple[str, ...]:
    """Up to ``n`` distinct contexts from the templates: few-shot prefix + the text before the first operand.

    Templates are taken in turn from each operation, so the contexts mix operations and forms; ``first`` is a
    template id whose context comes first (the operand grid's).
    """
    spacing = answer_spacing(tokenizer)
    per_op: dict[Operation, list[tuple[TemplateSet, Any]]] = defaultdict(list)
    for s in template_sets:
        for t in s.templates:
            if t.operation in operations:
                per_op[t.operation].append((s, t))
    ordered = [
        pair
        for i in range(max(map(len, per_op.values()), default=0))
        for op in operations
        for pair in per_op[op][i : i + 1]
    ]
    if first is not None:
        ordered = sorted(ordered, key=lambda st: st[1].id != first)
        if not ordered or ordered[0][1].id != first:
            raise FixableValueError(
                f"template {first!r} is not among the templates of operations {tuple(operations)}. ",
                "name a template of those operations (e.g. add_eq_1).",
            )
    out: list[str] = []
    for tset, tpl in ordered:
        ctx = _context_of(tokenizer, tset, tpl, fewshot, spacing)
        if ctx is not None and ctx not in out:
            out.append(ctx)
        if len(out) == n:
            break
    if not out:
        raise FixableValueError(
            f"no template of operations {tuple(operations)} gives a context (text before {{A}} without other "
            "placeholders). ",
            "load the bundled arithmetic templates, or pass contexts yourself.",
        )
    return tuple(out)


@dataclass(frozen=True, repr=False)
class NumberStates(SavedResult):
    """The residual stream at each number's last token, per context and depth (see the module docstring).

    ``states`` is ``[context, number, depth, d_model]``, depth 0 the token embedding; ``tokens_per_number`` and
    ``last_tokens`` are read in the first context.
    """

    numbers: tuple[int, ...]
    contexts: tuple[str, ...]
    states: Float[Tensor, "context number depth d_model"]
    tokenization: Tokenization
    tokens_per_number: tuple[int, ...]
    last_tokens: tuple[int, ...]
    reading: str
    model: ModelSpec | JSONObject

    STAGE = "numbers"

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", as_spec(self.model))
        c, n = self.states.shape[:2]
        if (c, n) != (len(self.contexts), len(self.numbers)):
            raise FixableValueError(
                f"states have {c} contexts x {n} numbers, but {len(self.contexts)} contexts and {len(self.numbers)} "
                "numbers are named. ",
                "build NumberStates with number_states().",
            )

    @property
    def depths(self) -> tuple[str, ...]:
        return depth_labels(self.states.shape[2] - 1)

    def headline(self) -> str:
        c, n, d, w = self.states.shape
        return f"{n} numbers x {c} contexts x {d} depths x {w}; {self.tokenization}"

    def to_dataframe(self) -> pd.DataFrame:
        """One row per number: its token count and the state's norm at each depth (first context)."""
        norms = self.states[0].norm(dim=-1)
        rows = {"number": list(self.numbers), "tokens": list(self.tokens_per_number)}
        rows |= {f"norm@{lab}": norms[:, d].tolist() for d, lab in enumerate(self.depths)}
        return pd.DataFrame(rows)


@torch.no_grad()
def number_states(
    model: HookedModel,
    numbers: Sequence[int] = range(100),
    contexts: Sequence[str] = ("",),
    batch_size: int = 64,
) -> NumberStates:
    """Record the residual stream at each number's last token, after every block, in each context.

    ``contexts`` from :func:`number_contexts`; ``""`` reads the number alone.
    """
    numbers = [int(n) for n in numbers]
    if not numbers or min(numbers) < 0 or len(set(numbers)) != len(numbers):
        raise FixableValueError(
            f"numbers {numbers[:5]}… must be distinct non-negative integers. ", "pass e.g. range(100)."
        )
    if not contexts:
        raise FixableValueError("no contexts given. ", "pass at least one context, e.g. number_contexts(...) or ('',).")
    tok, spec = model.tokenizer, model.spec
    n_layers = spec.n_layers
    out = torch.zeros(len(contexts), len(numbers), n_layers + 1, spec.d_model, device="cpu")
    names = [hooks.resid_pre(0), *(hooks.resid_post(l) for l in range(n_layers))]
    counts = number_token_counts(tok, contexts[0], numbers)
    last = [tok(contexts[0] + str(n), add_special_tokens=False)["input_ids"][-1] for n in numbers]
    for c, ctx in enumerate(contexts):
        ids = [tok(ctx + str(n), add_special_tokens=False)["input_ids"] for n in numbers]
        caches: PrefixCaches = {}  # the context's prefix runs once for all its numbers
        groups: dict[int, list[int]] = defaultdict(list)
        for i, row in enumerate(ids):
            groups[len(row)].append(i)
        for rows in groups.values():
            for j in range(0, len(rows), batch_size):
                chunk = rows[j : j + batch_size]
                toks = torch.tensor([ids[i] for i in chunk], device=model.device)
                grabbed: dict[str, Tensor] = {}

                def grab(name: str, into: dict[str, Tensor] = grabbed) -> Any:
                    def hook(act: Tensor, hook: Any) -> None:
                        into[name] = act[:, -1].detach().float().cpu()

                    return hook

                runner = model.prefix_cached([(n, grab(n)) for n in names], store=caches)
                runner.logits_from(toks, toks.shape[1] - 1)
                out[c, chunk] = torch.stack([grabbed[n] for n in names], dim=1)
    kind, reading = number_reading(counts, numbers)
    return NumberStates(
        numbers=tuple(numbers),
        contexts=tuple(contexts),
        states=out,
        tokenization=kind,
        tokens_per_number=tuple(counts),
        last_tokens=tuple(last),
        reading=reading,
        model=spec,
    )
