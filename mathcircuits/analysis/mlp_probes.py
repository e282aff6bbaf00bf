"""What the MLPs read and write, seen through the unembedding (Zhang et al. 2024, §4.2).

Background. After the operand and operator heads have moved information to
the last position, the paper finds that MLPs turn it into the answer: the MLP
*input* at the last position resembles the unembedding of the operands, and the
MLP *update* (what the MLP adds to the residual stream) increasingly resembles
the unembedding of the answer, layer by layer (the paper's "4 + 3" example).
This module measures both at the last position of every pair, per layer.

Quantities (per pair *p*, layer *l*, at the last position):

* ``input_sim_a/b/answer``: cosine of the MLP input with the unembedding
  column ``W_U[:, t]`` of the first token of A, of B and of the answer C, and
  ``input_sim_others``: its mean over the candidate numbers that are none of
  A, B, C (number tokens share a common direction, so this is the baseline to
  read the others against);
* ``update_sim_answer``: cosine of the MLP update ``u_l`` with ``W_U[:, C]``;
  ``update_sim_others``: its mean over the other candidate numbers (the first
  tokens of 0..``max_number``, excluding C's). The MLP update is the MLP's
  output ``hook_mlp_out`` as added to the residual (after the post-feed-forward
  norm on Gemma 2/3 and OLMo 2), which equals ``resid_post − resid_mid`` in
  sequential blocks (checked in the tests);
* ``update_direct_answer``: the update's *direct effect* on the answer's final
  logit, ``(LN_f(x_L) − LN_f(x_L − u_l)) · W_U[:, C]`` with ``x_L`` the final
  residual (exact, norm included), and ``update_direct_margin``: the same minus
  its mean over the other candidate numbers, in logits. Positive margins mean
  "this MLP raises the answer above the other numbers";
* ``lens_rank``: the logit-lens rank of the answer after layer *l*
  (``LN_f(resid_post_l) @ W_U + b_U``; 0 = top-1 of the whole vocabulary).

Which space (``space=``). Cosine ignores a vector's length, so the RMS or
LayerNorm *scale* does not matter, but the norms' per-dimension *gains* do:

* ``"lens"`` (default): both the MLP input (the residual the MLP reads:
  ``resid_mid``, or ``resid_pre`` in parallel blocks such as Pythia's) and the update are
  mapped by the final norm's linear part, ``phi(v) = LN_f(v) − LN_f(0)`` (its
  gain, and centring for LayerNorm), then compared with raw ``W_U`` columns.
  That is the space in which the unembedding actually reads the residual, so
  the cosines say how strongly a vector would promote a token under the logit
  lens. It works for any norm without reading its weights.
* ``"raw"``: the paper's reading: the MLP input is what the MLP sees, the
  output of its input norm (``blocks.{l}.mlp.hook_in``, with the norm's gain), and the
  update is ``hook_mlp_out`` as is, both against raw ``W_U`` columns. Gains can
  differ a lot between dimensions (SmolLM2), so raw cosines mix in dimensions
  the unembedding barely reads; we keep it for comparison with the paper.

Intervals. :meth:`MLPProbeResult.layer_summary` gives each layer's mean direct
margin a percentile-bootstrap interval over pairs, and its logit-lens top-1 share a
Wilson interval; :meth:`MLPProbeResult.layer_interval` bootstraps the pairs and
recomputes :meth:`~MLPProbeResult.first_raising_layer` or
:meth:`~MLPProbeResult.lens_top1_layer` on each resample, giving the layer itself
an interval (a resample with no such layer counts as ``n_layers``).

Numbers that tokenize to several tokens use their first token (digits are
single tokens in SmolLM2 and Llama; the answer's first token is what path
patching targets too).

For one chosen pair (``case_row``) the result also lists, per layer, the
candidate numbers and the vocabulary tokens with the largest direct effect of
that layer's MLP update: the per-layer trajectory of what each MLP promotes.

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
from mathcircuits.data import answer_spacing
from mathcircuits.data.pairs import token_strings
from mathcircuits.data.pairset import PairSet
from mathcircuits.models import HookedModel, hooks
from mathcircuits.models.families import block_structure
from mathcircuits.models.forward.placement import unembed_columns
from mathcircuits.models.forward.prefix import PrefixRunner
from mathcircuits.models.forward.readout import final_norm, vocab_logits

__all__ = ["mlp_probes", "number_tokens"]


def number_tokens(tokenizer: PreTrainedTokenizerBase, numbers: list[int], context: str) -> list[int]:
    """First token of each number as it would follow ``context`` (the prompt the answer follows).

    Args:
        tokenizer: the model's Hugging Face tokenizer.
        numbers: the numbers to tokenize.
        context: the prompt text the numbers follow.

    Returns:
        The id of each number's first token, in the order of ``numbers``.

    Raises:
        ValueError: if a number merges with the end of the prompt (the prompt's own tokens change).
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
    dataset: PairSet,
    space: Space = "lens",
    case_row: int | str = 0,
    max_number: int | None = None,
    top_k: int = 5,
    batch_size: int = 16,
) -> MLPProbeResult:
    """Probe every layer's MLP input and update against the unembedding, for every pair of ``dataset``.

    ``dataset`` has the columns of :func:`mathcircuits.data.generate_pairs`
    (usually the correct pairs). ``max_number`` bounds the candidate numbers
    0..max_number (default: the largest operand or integer answer, at least 9).
    ``case_row`` picks the prompt traced layer by layer: a row index, or a
    string that the prompt ends with (e.g. ``"4 + 3 = "``; the first match).

    Args:
        model: the :class:`~mathcircuits.models.HookedModel` to run.
        dataset: pairs with ``tokens``, ``prompt``, ``answer``,
            ``answer_token``, ``a``, ``b``, ``operation`` and ``pair_id`` columns.
        space: ``"lens"`` (vectors through the final norm, as the logit lens sees them) or ``"raw"``
            (the MLP's own input ``mlp.hook_in``).
        case_row: the traced prompt: a row index, or the text the prompt ends with.
        max_number: largest candidate number (None: from the data, at least 9).
        top_k: how many top numbers and tokens to keep per layer for the traced prompt.
        batch_size: pairs per forward pass (batches are grouped by template).

    Returns:
        An :class:`MLPProbeResult` whose per-probe fields (similarities, direct effects, lens rank and
        probability) have shape ``[pair, layer]``, with the candidate numbers/tokens and the traced prompt's
        top numbers and tokens per layer.

    Raises:
        ValueError: if ``space`` is unknown, no prompt ends with ``case_row``, columns are missing, the dataset
            is empty, or a number merges with the end of the prompt.
        IndexError: if ``case_row`` is an index out of range.
    """
    if space not in SPACES:
        raise FixableValueError(f"space {space!r} is unknown. ", f"use one of {SPACES}.")
    dataset.require(("tokens", "prompt", "answer", "answer_token", "a", "b", "operation", "pair_id"), "mlp_probes")
    n = len(dataset)
    if isinstance(case_row, str):
        matches = [
            i for i, p in enumerate(dataset.prompts) if p.endswith(case_row) or p.rstrip().endswith(case_row.rstrip())
        ]
        if not matches:
            raise FixableValueError(
                f"no prompt ends with {case_row!r}. ",
                f"pass a row index, or the end of a prompt in the dataset (e.g. {dataset.prompts[0][-12:]!r}).",
            )
        case_row = matches[0]
    if not 0 <= case_row < n:
        raise FixableIndexError(
            f"case_row {case_row} is out of range for a dataset of {n} pairs. ", f"choose 0..{n - 1}."
        )
    bridge, tok = model.bridge, model.tokenizer
    n_layers = model.spec.n_layers
    ints = [v for v in (*dataset.a, *dataset.b, *(_as_int(x) for x in dataset.answers)) if v is not None]
    top = max_number if max_number is not None else max(max(ints), 9)
    numbers = list(range(0, top + 1))
    context = dataset.prompts[case_row]
    num_toks = number_tokens(tok, numbers, context)
    first_of: dict[int, int] = {}
    for num, t in zip(numbers, num_toks):
        first_of.setdefault(t, num)  # distinct first tokens, labelled by their smallest number
    cand_tokens = list(first_of)
    tok_a = number_tokens(tok, [int(x) for x in dataset.a], context)
    tok_b = number_tokens(tok, [int(x) for x in dataset.b], context)
    ans_tok = [int(x) for x in dataset.answer_token]
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
    prefixes: dict[tuple[int, ...], Any] = {}  # clean prefix KV caches, shared by the batches of a template
    for idx, toks in dataset.prompt_batches(batch_size, model.device):
        store: dict[str, Tensor] = {}

        # keyed by the name we asked for: the bridge reports aliases under their canonical names
        def grab(name: str, store: dict[str, Tensor] = store):  # bound now: the loop rebinds `store`
            def hook_fn(x: Tensor, hook: Any) -> None:
                store[name] = x[:, -1].detach().float().to(W_U.device)

            return hook_fn

        names = [hooks.sub(layer, k) for layer in range(n_layers) for k in kinds]
        # only the last position is read: the shared prefix runs once
        PrefixRunner(bridge, [(name, grab(name)) for name in names], store=prefixes).logits_from(
            toks, toks.shape[1] - 1
        )
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
        operations=list(dataset.operations),
        pair_ids=[int(x) for x in dataset.pair_ids],
        answers=[str(x) for x in dataset.answers],
        candidate_numbers=[first_of[t] for t in cand_tokens],
        candidate_tokens=cand_tokens,
        candidate_texts=cand_labels,
        case_row=case_row,
        case_prompt=dataset.prompts[case_row],
        case_answer=str(dataset.answers[case_row]),
        **case,
        settings=ProbeSettings(max_number=top, top_k=top_k, batch_size=batch_size),
    )
