"""Reference path patching: one full hooked forward per sender (slow, plainly correct).

Every layer's ``hook_z`` writes back all heads' reference values (freezing them), except the sender's
value at the patched position, which comes from the counterfactual run; an MLP sender is patched on
``hook_mlp_out`` (after its output norm on Gemma 2/3 and OLMo 2). MLPs and norms recompute. This is the
textbook definition and needs no knowledge of the block's shape, so it works on every family;
:mod:`mathcircuits.patching.exact` must agree with it (≤ 1e-4 on every family, tested).

Senders share a forward, stacked along the batch (:data:`ROWS_PER_FORWARD`); rows never interact. With a
metric that reads every answer token the prompts are teacher-forced and every answer position is patched.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mathcircuits.data.pairs import PairBatch
from mathcircuits.models import HookedModel, Readout, capture, hooks
from mathcircuits.patching.metrics import Metric, answer_readout
from mathcircuits.patching.scan import BatchEffects, Senders, scan_answers

__all__: list[str] = []

ROWS_PER_FORWARD = 64
"""Rows of one hooked forward: senders are stacked along the batch, each on its own copy of the pairs (a row's
forward does not depend on the other rows, so this is the same computation as one forward per sender)."""


@torch.no_grad()
def reference_scan(
    model: HookedModel,
    batch: PairBatch,
    senders: Senders,
    metric: Metric,
    *,
    chunk_rows: int = 8192,
    progress: bool = False,
) -> BatchEffects:
    """Effects of every sender for one batch, one hooked forward per sender (``chunk_rows``, ``progress`` unused)."""
    bridge, spec = model.bridge, model.spec
    L, H = spec.n_layers, spec.n_heads
    answers = scan_answers(batch, metric)
    tokens, cf_tokens = batch.tokens, batch.cf_tokens
    if answers is not None:
        tokens = torch.cat([tokens, answers[:, :-1]], 1)
        cf_tokens = torch.cat([cf_tokens, answers[:, :-1]], 1)
    k = 1 if answers is None else answers.shape[1]
    position = slice(-k, None)  # the patched and read positions: the last prompt position and every answer position
    z_names = [hooks.z(layer) for layer in range(L)]
    m_names = [hooks.mlp_out(layer) for layer in range(L)]
    if torch.equal(tokens, cf_tokens):  # a null patch: one forward is both runs
        clean_logits, ref = capture(bridge, tokens, z_names + m_names, position=None)
        cf_logits, cf = clean_logits, ref
    else:  # both prompt sets in one forward (rows never interact)
        B = tokens.shape[0]
        both, acts = capture(bridge, torch.cat([tokens, cf_tokens]), z_names + m_names, position=None)
        clean_logits, cf_logits = both[:B], both[B:]
        ref, cf = {k: acts[k][:B] for k in z_names}, {k: v[B:] for k, v in acts.items()}

    def read(logits: Tensor) -> Readout:
        if answers is None:
            return Readout.from_logits(logits[:, -1], batch.answer, metric.needs_probs)
        return answer_readout(logits[:, -k:], answers, metric)

    clean = read(clean_logits)
    B = batch.tokens.shape[0]
    head_eff = torch.full((B, L, H), float("nan"), device="cpu")
    mlp_eff = torch.full((B, L), float("nan"), device="cpu")
    wanted = [("head", layer, h) for layer in range(L) for h in range(H) if senders.wants("head", layer, h)]
    wanted += [("mlp", layer, -1) for layer in range(L) if senders.wants("mlp", layer)]
    per_forward = max(1, ROWS_PER_FORWARD // B)

    def run(group: list[tuple[str, int, int]]) -> Tensor:
        """One hooked forward for a group of senders, each on its own copy of the batch's rows."""
        G = len(group)

        def freeze(layer: int) -> Any:
            name = z_names[layer]
            mine = [(g, h) for g, (kind, s_layer, h) in enumerate(group) if kind == "head" and s_layer == layer]

            def hook(act: Tensor, hook: Any) -> Tensor:
                new = ref[name].repeat(G, *([1] * (ref[name].dim() - 1))).to(act.device, act.dtype)
                for g, h in mine:
                    new[g * B : (g + 1) * B, position, h] = cf[name][:, position, h].to(act.device, act.dtype)
                return new

            return hook

        def patch_mlp(layer: int) -> Any:
            name = m_names[layer]
            mine = [g for g, (kind, s_layer, _) in enumerate(group) if kind == "mlp" and s_layer == layer]

            def hook(act: Tensor, hook: Any) -> Tensor:
                new = act.clone()
                for g in mine:
                    new[g * B : (g + 1) * B, position] = cf[name][:, position].to(act.device, act.dtype)
                return new

            return hook

        fwd = [(z_names[layer], freeze(layer)) for layer in range(L)]
        fwd += [(m_names[layer], patch_mlp(layer)) for layer in sorted({s for k, s, _ in group if k == "mlp"})]
        rows = tokens.repeat(G, 1)
        # the read positions' logits only (the same numbers; Gemma 3's 262k-token unembedding of every position
        # would cost more than the blocks)
        logits = bridge.run_with_hooks(rows, fwd_hooks=fwd, logits_to_keep=k)
        return torch.stack([metric(read(logits[g * B : (g + 1) * B]), clean) for g in range(G)]).float().cpu()

    for start in range(0, len(wanted), per_forward):
        group = wanted[start : start + per_forward]
        for (kind, layer, head), eff in zip(group, run(group), strict=True):
            if kind == "head":
                head_eff[:, layer, head] = eff
            else:
                mlp_eff[:, layer] = eff
    return BatchEffects(
        heads=head_eff,
        mlps=mlp_eff,
        clean_logit=clean.logit.cpu(),
        total=metric(read(cf_logits), clean).float().cpu(),
        excluded=metric.excluded(clean).cpu(),
    )
