"""Reference path patching: one full hooked forward per sender (slow, plainly correct).

For each sender we run the whole model on the reference prompt with hooks on
every layer's ``hook_z`` that write back the reference values of all heads
(freezing them), except that the sender head's value at the patched position
comes from the counterfactual run; an MLP sender is patched on
``hook_mlp_out``. MLPs and norms recompute. This is the textbook definition;
:mod:`mathcircuits.patching.exact` must agree with it (tests check ≤ 1e-4).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mathcircuits.patching._common import PairBatch, metric_from_logits

__all__ = ["reference_scan_batch"]


@torch.no_grad()
def reference_scan_batch(model: Any, batch: PairBatch, heads: bool, mlps: bool, metric: str, position: int = -1, progress: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    bridge, spec = model.bridge, model.spec
    L, H = spec.n_layers, spec.n_heads
    z_names = [f"blocks.{l}.attn.hook_z" for l in range(L)]
    m_names = [f"blocks.{l}.hook_mlp_out" for l in range(L)]
    filt = set(z_names + m_names)
    clean_logits, ref = bridge.run_with_cache(batch.tokens, names_filter=lambda n: n in filt)
    _, cf = bridge.run_with_cache(batch.cf_tokens, names_filter=lambda n: n in filt)
    ans = batch.answer[:, None]
    clean_last = clean_logits[:, position]
    clean = clean_last.gather(-1, ans)[:, 0]
    clean_p = torch.softmax(clean_last.float(), -1).gather(-1, ans)[:, 0]
    B = batch.tokens.shape[0]
    head_eff = torch.full((B, L, H), float("nan"))
    mlp_eff = torch.full((B, L), float("nan"))

    def run(sender: tuple[str, int, int]) -> Tensor:
        kind, s_layer, s_head = sender

        def freeze(layer: int) -> Any:
            name = z_names[layer]

            def hook(act: Tensor, hook: Any) -> Tensor:
                new = ref[name].clone()
                if kind == "head" and layer == s_layer:
                    new[:, position, s_head] = cf[name][:, position, s_head]
                return new

            return hook

        def patch_mlp(act: Tensor, hook: Any) -> Tensor:
            new = act.clone()
            new[:, position] = cf[m_names[s_layer]][:, position]
            return new

        hooks: list[tuple[str, Any]] = [(z_names[l], freeze(l)) for l in range(L)]
        if kind == "mlp":
            hooks.append((m_names[s_layer], patch_mlp))
        logits = bridge.run_with_hooks(batch.tokens, fwd_hooks=hooks)[:, position]
        return metric_from_logits(metric, logits.gather(-1, ans)[:, 0], clean, torch.softmax(logits.float(), -1).gather(-1, ans)[:, 0], clean_p)

    for layer in range(L):
        if heads:
            for h in range(H):
                head_eff[:, layer, h] = run(("head", layer, h)).float().cpu()
        if mlps:
            mlp_eff[:, layer] = run(("mlp", layer, -1)).float().cpu()
    return head_eff, mlp_eff, clean
