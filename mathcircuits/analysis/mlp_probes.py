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

from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from mathcircuits._io import SavedResult
from mathcircuits.analysis._common import columns, operation_rows, spec_dict, template_keys, token_strings
from mathcircuits.data.batching import iter_batches
from mathcircuits.data.generate import answer_spacing
from mathcircuits.models import hooks
from mathcircuits.models.families import block_structure
from mathcircuits.models.prefix import PrefixRunner
from mathcircuits.models.spec import ModelSpec, as_spec
from mathcircuits.stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_N_BOOT,
    Interval,
    bootstrap_indices,
    bootstrap_mean,
    wilson_interval,
)

__all__ = ["SPACES", "MLPProbeResult", "mlp_probes", "number_tokens"]

SPACES = ("lens", "raw")
_PROBES = (  # the per-pair, per-layer fields; lens_prob last
    "input_sim_a",
    "input_sim_b",
    "input_sim_answer",
    "input_sim_others",
    "update_sim_answer",
    "update_sim_others",
    "update_direct_answer",
    "update_direct_margin",
    "lens_rank",
    "lens_prob",
)


@dataclass(frozen=True)
class MLPProbeResult(SavedResult):
    """Per-pair, per-layer probes of the MLPs against the unembedding (see the module docstring)."""

    STAGE = "analyze"

    model: ModelSpec | dict[str, Any]  # a dict from ModelSpec.to_dict() is converted
    space: str
    input_sim_a: Float[Tensor, "pair layer"]
    input_sim_b: Float[Tensor, "pair layer"]
    input_sim_answer: Float[Tensor, "pair layer"]
    input_sim_others: Float[Tensor, "pair layer"]
    update_sim_answer: Float[Tensor, "pair layer"]
    update_sim_others: Float[Tensor, "pair layer"]
    update_direct_answer: Float[Tensor, "pair layer"]
    update_direct_margin: Float[Tensor, "pair layer"]
    lens_rank: Float[Tensor, "pair layer"]
    lens_prob: Float[Tensor, "pair layer"]
    operations: list[str]
    pair_ids: list[int]
    answers: list[str]
    candidate_numbers: list[int]
    candidate_tokens: list[int]
    candidate_texts: list[str]
    case_row: int
    case_prompt: str
    case_answer: str
    case_answer_label: str
    case_top_numbers: list[list[str]]
    case_top_number_scores: Float[Tensor, "layer k_num"]
    case_top_tokens: list[list[str]]
    case_top_token_scores: Float[Tensor, "layer k_tok"]
    case_lens_top: list[str]
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", as_spec(self.model))
        if self.space not in SPACES:
            raise ValueError(f"space {self.space!r} is unknown. Fix: use one of {SPACES}.")

    @property
    def n_layers(self) -> int:
        return int(self.input_sim_a.shape[1])

    def operation_names(self) -> list[str]:
        return list(dict.fromkeys(self.operations))

    def rows(self, operation: str | None = None) -> Tensor:
        return operation_rows(self.operations, operation)

    def first_raising_layer(self, operation: str | None = None, min_margin: float = 0.25) -> int | None:
        """First layer whose MLP update, on average over pairs, raises the answer above the other numbers.

        That is, mean ``update_direct_margin`` > ``min_margin`` (logits); None if no layer does.
        """
        return _first_raising(self.update_direct_margin[self.rows(operation)], min_margin)

    def lens_top1_layer(self, operation: str | None = None, min_share: float = 0.5) -> int | None:
        """First layer after which the logit lens ranks the answer top-1 for at least ``min_share`` of the pairs.

        None if there is no such layer.
        """
        return _lens_top1(self.lens_rank[self.rows(operation)], min_share)

    def layer_interval(
        self,
        which: str,
        operation: str | None = None,
        n_boot: int = DEFAULT_N_BOOT,
        seed: int = 0,
        confidence: float = DEFAULT_CONFIDENCE,
    ) -> Interval:
        """Bootstrap interval of :meth:`first_raising_layer` (``which="raising"``) or :meth:`lens_top1_layer`
        (``which="lens_top1"``), both at their default thresholds, resampling the pairs.

        Args:
            which: ``"raising"`` or ``"lens_top1"``.
            operation: restrict to the pairs of one operation (None: all).
            n_boot: bootstrap resamples.
            seed: bootstrap seed.
            confidence: the interval's level.

        Returns:
            An :class:`~mathcircuits.stats.Interval` in layers; "no such layer" counts as ``n_layers``
            (in the value too).
        """
        fn = {"raising": (_first_raising, self.update_direct_margin), "lens_top1": (_lens_top1, self.lens_rank)}
        if which not in fn:
            raise ValueError(f"which={which!r} is unknown. Fix: use 'raising' or 'lens_top1'.")
        f, data = fn[which]
        data = data[self.rows(operation)]

        def layer(x: Tensor) -> int:
            got = f(x)
            return self.n_layers if got is None else got

        boots = torch.tensor([float(layer(data[i])) for i in bootstrap_indices(data.shape[0], n_boot, seed)])
        alpha = 1 - confidence
        q = torch.quantile(boots, torch.tensor([alpha / 2, 1 - alpha / 2], dtype=boots.dtype), interpolation="nearest")
        return Interval(float(layer(data)), float(q[0]), float(q[1]), int(data.shape[0]), confidence, "bootstrap", seed)

    def layer_summary(self, operation: str | None = None, n_boot: int = DEFAULT_N_BOOT, seed: int = 0):
        """One row per layer: means (and stds) over pairs of every probe, plus top-1 logit-lens accuracy.

        The direct margin and the update's cosine with the answer carry a bootstrap interval over pairs
        (``_low``/``_high``; ``n_boot`` resamples, seed ``seed``), the top-1 share a Wilson interval.
        """

        idx = self.rows(operation)
        out: dict[str, Any] = {"layer": list(range(self.n_layers))}
        for name in _PROBES[:-1]:
            vals = getattr(self, name)[idx]
            out[name] = vals.mean(0).tolist()
            out[f"{name}_std"] = vals.std(0, unbiased=False).tolist()
            if name in ("update_direct_margin", "update_sim_answer"):
                lo, hi = bootstrap_mean(vals, n_boot, seed)
                out[f"{name}_low"], out[f"{name}_high"] = lo.tolist(), hi.tolist()
        top1 = (self.lens_rank[idx] == 0).sum(0).tolist()
        wil = [wilson_interval(int(k), len(idx)) for k in top1]
        out["lens_top1"] = [w.value for w in wil]
        out["lens_top1_low"], out["lens_top1_high"] = [w.low for w in wil], [w.high for w in wil]
        df = pd.DataFrame(out)
        df.insert(0, "operation", operation or "all")
        return df

    def to_dataframe(self):
        """Long form: one row per pair x layer with every probe."""

        n_pairs, n_layers = self.input_sim_a.shape
        p = torch.arange(n_pairs).repeat_interleave(n_layers).tolist()
        data: dict[str, Any] = {
            "pair_id": [self.pair_ids[i] for i in p],
            "operation": [self.operations[i] for i in p],
            "answer": [self.answers[i] for i in p],
            "layer": list(range(n_layers)) * n_pairs,
        }
        for name in _PROBES:
            data[name] = getattr(self, name).flatten().tolist()
        return pd.DataFrame(data)

    def case_dataframe(self):
        """The chosen pair: per layer, the top numbers / tokens its MLP update promotes and the answer's lens rank."""

        rows = []
        for layer in range(self.n_layers):
            rows.append(
                {
                    "layer": layer,
                    "top_numbers": " ".join(self.case_top_numbers[layer]),
                    "top_number_effect": float(self.case_top_number_scores[layer, 0]),
                    "top_tokens": " | ".join(repr(t) for t in self.case_top_tokens[layer]),
                    "lens_top1": self.case_lens_top[layer],
                    "answer_lens_rank": int(self.lens_rank[self.case_row, layer]),
                    "answer_direct_effect": float(self.update_direct_answer[self.case_row, layer]),
                }
            )
        return pd.DataFrame(rows)


def _first_raising(margin: Float[Tensor, "pair layer"], min_margin: float = 0.25) -> int | None:
    above = (margin.mean(0) > min_margin).nonzero()
    return int(above[0]) if len(above) else None


def _lens_top1(rank: Float[Tensor, "pair layer"], min_share: float = 0.5) -> int | None:
    above = ((rank == 0).float().mean(0) >= min_share).nonzero()
    return int(above[0]) if len(above) else None


def number_tokens(tokenizer: Any, numbers: list[int], context: str) -> list[int]:
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
            raise ValueError(
                f"the number {n} merges with the end of the prompt {context[-20:]!r}. Fix: use prompts that end with "
                "a separator such as '= '."
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
    model: Any,
    dataset: Any,
    space: str = "lens",
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
        dataset: a ``datasets.Dataset`` (or list of row dicts) with ``tokens``, ``prompt``, ``answer``,
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
        raise ValueError(f"space {space!r} is unknown. Fix: use one of {SPACES}.")
    cols = columns(dataset, ("tokens", "prompt", "answer", "answer_token", "a", "b", "operation", "pair_id"))
    n = len(cols["tokens"])
    if isinstance(case_row, str):
        matches = [
            i for i, p in enumerate(cols["prompt"]) if p.endswith(case_row) or p.rstrip().endswith(case_row.rstrip())
        ]
        if not matches:
            raise ValueError(
                f"no prompt ends with {case_row!r}. Fix: pass a row index, or the end of a prompt in the dataset "
                f"(e.g. {cols['prompt'][0][-12:]!r})."
            )
        case_row = matches[0]
    if not 0 <= case_row < n:
        raise IndexError(f"case_row {case_row} is out of range for a dataset of {n} pairs. Fix: choose 0..{n - 1}.")
    bridge, tok = model.bridge, model.tokenizer
    n_layers = model.spec.n_layers
    ints = [v for v in (*cols["a"], *cols["b"], *(_as_int(x) for x in cols["answer"])) if v is not None]
    top = max_number if max_number is not None else max(max(ints), 9)
    numbers = list(range(0, top + 1))
    context = cols["prompt"][case_row]
    num_toks = number_tokens(tok, numbers, context)
    first_of: dict[int, int] = {}
    for num, t in zip(numbers, num_toks):
        first_of.setdefault(t, num)  # distinct first tokens, labelled by their smallest number
    cand_tokens = list(first_of)
    tok_a = number_tokens(tok, [int(x) for x in cols["a"]], context)
    tok_b = number_tokens(tok, [int(x) for x in cols["b"]], context)
    ans_tok = [int(x) for x in cols["answer_token"]]
    for t in ans_tok:
        if t not in first_of:
            cand_tokens.append(t)
            first_of[t] = -1
    cand = torch.tensor(cand_tokens, device=model.device)

    W_U = bridge.W_U.float()  # activations are read as float32 (also from a bf16 model)
    b_U = getattr(bridge, "b_U", None)
    d_model = W_U.shape[0]
    zero_img = bridge.ln_final(torch.zeros(1, 1, d_model, device=W_U.device, dtype=W_U.dtype))[0, 0]

    def phi(v: Tensor) -> Tensor:
        return bridge.ln_final(v) - zero_img

    out = {k: torch.zeros(n, n_layers) for k in _PROBES}
    case: dict[str, Any] = {}
    structure = block_structure(model)
    reads = structure.mlp_reads  # hook_resid_mid, or hook_resid_pre in parallel blocks
    cap = structure.logit_softcap  # Gemma 2 soft-caps its logits: the lens after the last layer must too
    kinds = [reads, "hook_mlp_out", "hook_resid_post"] + (["mlp.hook_in"] if space == "raw" else [])
    by_template = {"tokens": cols["tokens"], "template_id": template_keys(dataset)}
    prefixes: dict[tuple[int, ...], Any] = {}  # clean prefix KV caches, shared by the batches of a template
    for idx, batch in iter_batches(by_template, batch_size, model.device, group_by="template_id"):
        toks = batch["tokens"]
        store: dict[str, Tensor] = {}

        # keyed by the name we asked for: the bridge reports aliases under their canonical names
        def grab(name: str, store: dict[str, Tensor] = store):  # bound now: the loop rebinds `store`
            def hook_fn(x: Tensor, hook: Any) -> None:
                store[name] = x[:, -1].detach().float()

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
        ia, ib, ic = (torch.tensor([t[i] for i in idx], device=model.device) for t in (tok_a, tok_b, ans_tok))
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
        delta = bridge.ln_final(final[:, None, :]) - bridge.ln_final(final[:, None, :] - upd)  # [B, L, d]
        direct = delta @ W_U[:, cand]  # [B, L, C]
        direct_ans = (delta * W_U[:, ic].T[:, None, :]).sum(-1)
        out["update_direct_answer"][idx] = direct_ans.cpu()
        out["update_direct_margin"][idx] = (
            direct_ans - (direct * others[:, None]).sum(-1) / others.sum(-1)[:, None]
        ).cpu()
        lens = bridge.ln_final(post) @ W_U + (b_U if b_U is not None else 0)  # [B, L, V]
        lens = lens if cap is None else cap * torch.tanh(lens / cap)
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
        model=spec_dict(model),
        space=space,
        **out,
        operations=list(cols["operation"]),
        pair_ids=[int(x) for x in cols["pair_id"]],
        answers=[str(x) for x in cols["answer"]],
        candidate_numbers=[first_of[t] for t in cand_tokens],
        candidate_tokens=cand_tokens,
        candidate_texts=cand_labels,
        case_row=case_row,
        case_prompt=cols["prompt"][case_row],
        case_answer=str(cols["answer"][case_row]),
        **case,
        settings={"max_number": top, "top_k": top_k, "batch_size": batch_size},
    )
