"""What the MLPs read and write, seen through the unembedding (Zhang et al. 2024, §4.2).

After the operand and operator heads move information to the last position, the paper finds that the
MLPs turn it into the answer: the MLP *input* resembles the operands' unembedding, and the MLP *update*
increasingly resembles the answer's, layer by layer (the "4 + 3" example). Per pair and layer, at the
last position:

* ``input_sim_a/b/answer``: cosine of the MLP input with ``W_U[:, t]`` of the first token of A, B and
  the answer C; ``input_sim_others``: its mean over the other candidate numbers (number tokens share a
  common direction, so this is the baseline);
* ``update_sim_answer`` / ``update_sim_others``: the same for the MLP update ``u_l``, ``hook_mlp_out`` as
  added to the residual (after the post-feed-forward norm on Gemma 2/3 and OLMo 2; equals
  ``resid_post − resid_mid`` in sequential blocks, tested). Candidates: first tokens of 0..``max_number``;
* ``update_direct_answer``: the update's exact *direct effect* on the answer's final logit,
  ``(LN_f(x_L) − LN_f(x_L − u_l)) · W_U[:, C]``; ``update_direct_margin``: minus its mean over the
  other candidates, in logits (positive: the MLP raises the answer above the other numbers);
* ``lens_rank``: the answer's logit-lens rank after layer *l* (0 = top-1 of the vocabulary).

Which space (``space=``). Cosine ignores the norms' *scale* but not their per-dimension *gains*:

* ``"lens"`` (default): MLP input (``resid_mid``, or ``resid_pre`` in parallel blocks) and update are
  mapped by the final norm's linear part, ``phi(v) = LN_f(v) − LN_f(0)``, then compared with raw ``W_U``
  columns: the space in which the unembedding reads the residual. Works for any norm.
* ``"raw"``: the paper's reading: the MLP's normed input (``blocks.{l}.mlp.hook_in``) and the raw update.
  Gains differ a lot between dimensions (SmolLM2), so raw cosines mix in dimensions the unembedding
  barely reads; kept for comparison with the paper.

Multi-token numbers use their first token (digits are single tokens in SmolLM2 and Llama; path patching
targets the answer's first token too).

Reference: W. Zhang et al., "Interpreting and Improving Large Language Models
in Arithmetic Calculation", ICML 2024 (arXiv 2409.01659), §4.2.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import PreTrainedTokenizerBase

from mathcircuits._errors import FixableIndexError, FixableValueError
from mathcircuits.analysis.probe_result import PROBES, SPACES, MLPProbeResult, ProbeSettings, Space
from mathcircuits.data.pairs import token_strings
from mathcircuits.data.pairset import PairSet
from mathcircuits.data.render import answer_spacing
from mathcircuits.models import (
    HookedModel,
    PrefixCaches,
    final_norm,
    hooks,
    unembed_columns,
    vocab_logits,
)
from mathcircuits.models.families import block_structure

__all__ = [
    "mlp_probes",
]


def number_tokens(tokenizer: PreTrainedTokenizerBase, numbers: list[int], context: str) -> list[int]:
    """First token of each number as it would follow ``context`` (the prompt the answer follows).

    ValueError when a number merges with the end of the prompt (the prompt's own tokens change).
    """
    spacing = answer_spacing(tokenizer)
    base = tokenizer(context, add_special_tokens=False)["input_ids"]
    out = []
    for n in numbers:
        text = str(n) if spacing == "prompt" else " " + str(n)
        ids = tokenizer(context + text, add_special_tokens=False)["input_ids"]
        if ids[: len(base)] != base or len(ids) == len(base):
            raise FixableValueError(
                f"the number {n} merges with the end of the prompt {context[-20:]!r}. ",
                "use prompts that end with a separator such as '= '.",
            )
        out.append(ids[len(base)])
    return out


def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _cos(x: Tensor, w: Tensor) -> Tensor:
    """cos of x [B, L, d] with per-pair directions w [B, d] -> [B, L]."""
    return F.cosine_similarity(x, w[:, None, :], dim=-1)


@torch.no_grad()
def mlp_probes(
    model: HookedModel,
    pairs: PairSet,
    space: Space = "lens",
    case_row: int | str = 0,
    max_number: int | None = None,
    top_k: int = 5,
    batch_size: int = 16,
) -> MLPProbeResult:
    """Probe every layer's MLP input and update against the unembedding, for every pair of ``pairs``.

    ``pairs``: pairs of :func:`mathcircuits.data.generate_pairs` (usually the correct ones). ``space``:
    ``"lens"`` or ``"raw"`` (module docstring). ``case_row``: the prompt traced layer by layer, a row index
    or the text the prompt ends with (e.g. ``"4 + 3 = "``; the first match). ``max_number``: largest
    candidate number (None: the largest operand or integer answer, at least 9). ``top_k``: numbers and
    tokens kept per layer for the traced prompt. Batches are grouped by template. The per-probe fields are
    ``[pair, layer]``.
    """
    pairs.require_model(model, "mlp_probes")
    if space not in SPACES:
        raise FixableValueError(f"space {space!r} is unknown. ", f"use one of {SPACES}.")
    pairs.require(("tokens", "prompt", "answer", "answer_token", "a", "b", "operation", "pair_id"), "mlp_probes")
    n = len(pairs)
    if isinstance(case_row, str):
        matches = [
            i for i, p in enumerate(pairs.prompts) if p.endswith(case_row) or p.rstrip().endswith(case_row.rstrip())
        ]
        if not matches:
            raise FixableValueError(
                f"no prompt ends with {case_row!r}. ",
                f"pass a row index, or the end of a prompt of the pair set (e.g. {pairs.prompts[0][-12:]!r}).",
            )
        case_row = matches[0]
    if not 0 <= case_row < n:
        raise FixableIndexError(
            f"case_row {case_row} is out of range for a pair set of {n} pairs. ", f"choose 0..{n - 1}."
        )
    tok = model.tokenizer
    n_layers = model.spec.n_layers
    ints = [v for v in (*pairs.a, *pairs.b, *(_as_int(x) for x in pairs.answers)) if v is not None]
    top = max_number if max_number is not None else max(max(ints), 9)
    numbers = list(range(0, top + 1))
    context = pairs.prompts[case_row]
    num_toks = number_tokens(tok, numbers, context)
    first_of: dict[int, int] = {}
    for num, t in zip(numbers, num_toks):
        first_of.setdefault(t, num)  # distinct first tokens, labelled by their smallest number
    cand_tokens = list(first_of)
    tok_a = number_tokens(tok, [int(x) for x in pairs.a], context)
    tok_b = number_tokens(tok, [int(x) for x in pairs.b], context)
    ans_tok = [int(x) for x in pairs.answer_token]
    for t in ans_tok:
        if t not in first_of:
            cand_tokens.append(t)
            first_of[t] = -1
    W_U = unembed_columns(model, slice(None))[0].float()  # read as float32 (also from a bf16 model); offload-safe
    cand = torch.tensor(cand_tokens, device=W_U.device)  # every probe is computed where the unembedding is
    d_model = W_U.shape[0]
    structure = block_structure(model)  # the final norm and soft cap come from the family table
    zero_img = final_norm(model, structure, torch.zeros(1, 1, d_model, device=W_U.device, dtype=W_U.dtype))[0, 0]

    def phi(v: Tensor) -> Tensor:
        return final_norm(model, structure, v) - zero_img

    out = {k: torch.zeros(n, n_layers, device="cpu") for k in PROBES}
    case: dict[str, Any] = {}
    reads = structure.mlp_reads  # hook_resid_mid, or hook_resid_pre in parallel blocks
    kinds = [reads, "hook_mlp_out", "hook_resid_post"] + (["mlp.hook_in"] if space == "raw" else [])
    prefixes: PrefixCaches = {}  # clean prefix KV caches, shared by the batches of a template
    for idx, toks in pairs.prompt_batches(batch_size, model.device):
        store: dict[str, Tensor] = {}

        # keyed by the name we asked for: the bridge reports aliases under their canonical names
        def grab(name: str, store: dict[str, Tensor] = store):  # bound now: the loop rebinds `store`
            def hook_fn(x: Tensor, hook: Any) -> None:
                store[name] = x[:, -1].detach().float().to(W_U.device)

            return hook_fn

        names = [hooks.sub(layer, k) for layer in range(n_layers) for k in kinds]
        # only the last position is read: the shared prefix runs once
        model.prefix_cached([(name, grab(name)) for name in names], store=prefixes).logits_from(toks, toks.shape[1] - 1)
        stack = {
            k: torch.stack([store[hooks.sub(layer, k)] for layer in range(n_layers)], 1) for k in kinds
        }  # [B, L, d]
        mid, upd, post = stack[reads], stack["hook_mlp_out"], stack["hook_resid_post"]
        x_in, x_upd = (phi(mid), phi(upd)) if space == "lens" else (stack["mlp.hook_in"], upd)
        ia, ib, ic = (torch.tensor([t[i] for i in idx], device=W_U.device) for t in (tok_a, tok_b, ans_tok))
        out["input_sim_a"][idx] = _cos(x_in, W_U[:, ia].T).cpu()
        out["input_sim_b"][idx] = _cos(x_in, W_U[:, ib].T).cpu()
        out["input_sim_answer"][idx] = _cos(x_in, W_U[:, ic].T).cpu()
        out["update_sim_answer"][idx] = _cos(x_upd, W_U[:, ic].T).cpu()
        w_c = F.normalize(W_U[:, cand], dim=0)  # [d, C]
        not_abc = (
            (cand[None, :] != ia[:, None]) & (cand[None, :] != ib[:, None]) & (cand[None, :] != ic[:, None])
        ).float()  # [B, C]
        cos_in = F.normalize(x_in, dim=-1) @ w_c  # [B, L, C]
        out["input_sim_others"][idx] = (
            (cos_in * not_abc[:, None]).sum(-1) / not_abc.sum(-1).clamp(min=1)[:, None]
        ).cpu()
        cos_all = F.normalize(x_upd, dim=-1) @ w_c  # [B, L, C]
        others = (cand[None, :] != ic[:, None]).float()  # [B, C]
        out["update_sim_others"][idx] = ((cos_all * others[:, None]).sum(-1) / others.sum(-1)[:, None]).cpu()
        final = post[:, -1]  # [B, d], the input of the final norm
        delta = final_norm(model, structure, final[:, None, :]) - final_norm(
            model, structure, final[:, None, :] - upd
        )  # [B, L, d]
        direct = delta @ W_U[:, cand]  # [B, L, C]
        direct_ans = (delta * W_U[:, ic].T[:, None, :]).sum(-1)
        out["update_direct_answer"][idx] = direct_ans.cpu()
        out["update_direct_margin"][idx] = (
            direct_ans - (direct * others[:, None]).sum(-1) / others.sum(-1)[:, None]
        ).cpu()
        lens = vocab_logits(model, structure, post)  # [B, L, V]: the logit lens, soft-capped like the model
        ans_logit = lens.gather(-1, ic[:, None, None].expand(-1, n_layers, 1))
        out["lens_rank"][idx] = (lens > ans_logit).sum(-1).float().cpu()
        out["lens_prob"][idx] = (
            torch.softmax(lens, -1).gather(-1, ic[:, None, None].expand(-1, n_layers, 1))[..., 0].cpu()
        )
        if case_row in idx:
            b = idx.index(case_row)
            k_num = min(top_k, len(cand_tokens))
            num_scores, num_idx = direct[b].topk(k_num, dim=-1)
            tok_scores, tok_idx = (delta[b] @ W_U).topk(top_k, dim=-1)
            label = {t: (str(first_of[t]) if first_of[t] >= 0 else tok.decode([t])) for t in cand_tokens}
            case = {
                "case_answer_label": label[ans_tok[case_row]],
                "case_top_numbers": [[label[cand_tokens[j]] for j in row] for row in num_idx.tolist()],
                "case_top_number_scores": num_scores.float().cpu(),
                "case_top_tokens": [token_strings(tok, row) for row in tok_idx.tolist()],
                "case_top_token_scores": tok_scores.float().cpu(),
                "case_lens_top": token_strings(tok, lens[b].argmax(-1).tolist()),
            }
    cand_labels = [str(first_of[t]) if first_of[t] >= 0 else tok.decode([t]) for t in cand_tokens]
    return MLPProbeResult(
        model=model.spec,
        space=space,
        **out,
        operations=list(pairs.operations),
        pair_ids=[int(x) for x in pairs.pair_ids],
        answers=[str(x) for x in pairs.answers],
        candidate_numbers=[first_of[t] for t in cand_tokens],
        candidate_tokens=cand_tokens,
        candidate_texts=cand_labels,
        case_row=case_row,
        case_prompt=pairs.prompts[case_row],
        case_answer=str(pairs.answers[case_row]),
        **case,
        settings=ProbeSettings(max_number=top, top_k=top_k, batch_size=batch_size),
    )
