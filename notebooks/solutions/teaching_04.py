"""Solutions to the exercises of notebook 04 (teaching). Try each exercise before you read its solution.

The notebook's check cells call these only while an exercise still holds ``...``, so that the notebook runs on
from top to bottom; replace the ``...`` with your own code and the check runs on your answer instead.
"""

from __future__ import annotations

import torch

from mathcircuits.analysis import ROLES, attention_by_role
from mathcircuits.data import PairSet
from mathcircuits.models import hooks
from mathcircuits.patching import path_patch


def exercise_1(pair):
    """The positions where the reference and the counterfactual prompt differ."""
    return [i for i, (t, c) in enumerate(zip(pair["tokens"], pair["cf_tokens"])) if t != c]


@torch.no_grad()
def exercise_2(model, correct):
    """p(answer's first token) at the last position, on the reference and on the counterfactual prompts."""
    answer = torch.tensor(correct.answer_token)
    rows = torch.arange(len(correct))
    p_ref = model(torch.tensor(correct.tokens))[:, -1].softmax(-1)[rows, answer]
    p_cf = model(torch.tensor(correct.cf_tokens))[:, -1].softmax(-1)[rows, answer]
    return p_ref, p_cf


def exercise_3(tiny, tiny_pairs):
    """Path patching where the counterfactual is the reference itself."""
    same = PairSet(tiny_pairs.dataset.remove_columns("cf_tokens").add_column("cf_tokens", list(tiny_pairs.tokens)))
    return path_patch(tiny, same)


def exercise_4(exact):
    """The mean over pairs of the per-pair head effects."""
    return exact.per_pair_heads.mean(0)


def exercise_5(result):
    """The top head, its effect, and its share of the total effect."""
    top_layer, top_head, top_effect = result.top_heads(1)[0]
    total = result.total_interval().value  # the counterfactual prompt's own effect: everything patched at once
    return top_layer, top_head, top_effect, top_effect / abs(total)


def exercise_6(result):
    """The cut-off mean − 3·std of all heads' effects, and the heads below it (and negative)."""
    effects = result.head_effects
    cut = effects.mean() - 3 * effects.std()
    return float(cut), {(l, h) for l, h in ((effects < cut) & (effects < 0)).nonzero().tolist()}


def exercise_7(model, correct, layer, head):
    """The mean attention shares of one head over the token roles, and the role with the largest share."""
    shares = attention_by_role(model, correct, [(layer, head)]).mean()[0]
    return shares, ROLES[int(shares.argmax())]


@torch.no_grad()
def exercise_8(model, pairs, heads):
    """Per pair and head: the change of the whole answer's log-probability when one head takes its counterfactual
    value at the last prompt position and every answer position; ``(frozen, unfrozen)``, each ``[pair, head]``.

    Frozen: every other head keeps its clean value (path patching). Unfrozen: the later heads recompute (plain
    activation patching). Pairs of one prompt and answer length run as one batch.
    """
    frozen, unfrozen = torch.zeros(len(pairs), len(heads)), torch.zeros(len(pairs), len(heads))
    groups = {}
    for i, (n, answer) in enumerate(zip(pairs.n_tokens, pairs.answer_tokens)):
        groups.setdefault((n, len(answer)), []).append(i)
    for rows in groups.values():
        frozen[rows], unfrozen[rows] = _patch_heads(model, pairs.select(rows), heads)
    return frozen, unfrozen


@torch.no_grad()  # no autograd graph: the forwards only read values
def _patch_heads(model, rows, heads):
    names = [hooks.z(layer) for layer in range(model.spec.n_layers)]
    answers = torch.tensor(rows.answer_tokens)
    k = answers.shape[1]  # the answer is teacher-forced: read at the last prompt position and every answer position
    tokens = torch.cat([torch.tensor(rows.tokens), answers[:, :-1]], 1)
    cf_tokens = torch.cat([torch.tensor(rows.cf_tokens), answers[:, :-1]], 1)
    clean_logits, clean = model.bridge.run_with_cache(tokens, names_filter=lambda n: n in names)
    _, cf = model.bridge.run_with_cache(cf_tokens, names_filter=lambda n: n in names)

    def logp(logits):
        return logits[:, -k:].float().log_softmax(-1).gather(-1, answers[..., None])[..., 0].sum(-1)

    def effect(layer, head, freeze_others):
        def patch(z, hook):
            new = clean[hook.name].clone() if freeze_others else z.clone()
            if hook.name == names[layer]:
                new[:, -k:, head] = cf[hook.name][:, -k:, head]
            return new

        where = names if freeze_others else [names[layer]]
        logits = model.bridge.run_with_hooks(tokens, fwd_hooks=[(name, patch) for name in where])
        return logp(logits) - logp(clean_logits)

    return [torch.stack([effect(layer, head, freeze) for layer, head in heads], 1) for freeze in (True, False)]
