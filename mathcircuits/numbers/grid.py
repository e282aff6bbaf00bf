"""The operand grid of one operation, and one clean pass over it that the neuron and logit analyses share.

Nikankin et al. (2025) read every MLP neuron's activation over the *full* grid of operands ``a × b`` at the last
position, where the answer is predicted; Zhou et al. (2024) read what each head and MLP writes to the answer
logits there. One pass records:

* MLP neuron activations (``mlp.hook_post``, the input of ``W_out``) at the last position;
* their *attribution* to the answer, ``∂logit/∂act · (mean − act)`` (attribution patching, Nanda 2023;
  Syed et al. 2023), per prompt;
* what chosen heads and MLPs add to the residual at the last position, and the final residual, so their direct
  effect on any token's logit is exact: ``(LN(x) − LN(x − c)) · W_U[:, t]`` with the model's own final norm.

Every pass is a :class:`~mathcircuits.models.SuffixRunner` (prefix and operands run once).

Example::

    grid = operand_grid(model.tokenizer, load_templates(), "add_eq_1", (0, 19))
    cap = capture_grid(model, grid, layers=[3, 4], heads=[(14, 2)], mlps=[20])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits.data import GenerationConfig, PairSet, generate_pairs
from mathcircuits.data.batching import length_groups
from mathcircuits.data.render import answer_spacing
from mathcircuits.data.templates import TemplateSet
from mathcircuits.data.tokenizer_id import Tokenizer
from mathcircuits.models import HookedModel, SuffixRunner, head_out_weight, hooks, unembed_columns
from mathcircuits.models.families import block_structure

__all__ = [
    "GridCapture",
    "capture_grid",
    "operand_grid",
]


def mlp_post(layer: int) -> str:
    """The hook of an MLP's neuron activations (the input of its output projection)."""
    return hooks.sub(layer, "mlp.hook_post")


def answer_first_token(tokenizer: Any, n: int) -> int:
    """The first token of the answer ``n`` as the model would write it after ``"... = "`` (the template spacing)."""
    spacing = answer_spacing(tokenizer)
    base = "x =" + (" " if spacing == "prompt" else "")
    ans = str(n) if spacing == "prompt" else " " + str(n)
    before = tokenizer(base, add_special_tokens=False)["input_ids"]
    return tokenizer(base + ans, add_special_tokens=False)["input_ids"][len(before)]


def operand_grid(
    tokenizer: Tokenizer,
    template_sets: Sequence[TemplateSet],
    template_id: str,
    operand_range: tuple[int, int],
    fewshot: bool = True,
) -> PairSet:
    """Every pair ``a, b`` of the range rendered with one template (pairs without an answer left out), by ``a, b``.

    ``operand_range`` is inclusive, for both operands. Returns the rows of :func:`mathcircuits.data.generate_pairs`.
    """
    ops = {t.operation for s in template_sets for t in s.templates if t.id == template_id}
    if not ops:
        raise FixableValueError(f"template {template_id!r} is not loaded. ", "name a template of the loaded sets.")
    lo, hi = operand_range
    cfg = GenerationConfig(
        operations=tuple(ops),
        template_ids=(template_id,),
        n_per_template=(hi - lo + 1) ** 2,
        operand_range=(lo, hi),
        fewshot=fewshot,
    )
    ds = generate_pairs(tokenizer, list(template_sets), cfg)
    order = sorted(range(len(ds)), key=lambda i: (ds.a[i], ds.b[i]))
    return ds.select(order)


def grid_batches(grid: PairSet, rows: Sequence[int], batch_size: int) -> list[list[int]]:
    """``rows`` of the grid in batches of equal token length (so the last position is shared)."""
    lengths = [len(grid.tokens[i]) for i in rows]
    return [[rows[j] for j in g] for g in length_groups(lengths, batch_size)]


@dataclass(frozen=True)
class GridCapture:
    """The clean pass over an operand grid (see the module docstring); rows follow the grid.

    ``answer`` is the answer's first token, ``correct`` whether the model's top token is it. ``acts`` and ``grads``
    (``∂ logit(answer) / ∂ act``, zeros when not asked for) are ``[prompt, layer, neuron]`` at the last position;
    ``outputs`` is what each component (``L14.H2``, ``MLP 20``) adds there ``[prompt, component, d_model]``;
    ``final`` the final residual ``[prompt, d_model]``.
    """

    a: Int[Tensor, " prompt"]
    b: Int[Tensor, " prompt"]
    result: Int[Tensor, " prompt"]
    answer: Int[Tensor, " prompt"]
    correct: Bool[Tensor, " prompt"]
    layers: tuple[int, ...]
    acts: Float[Tensor, "prompt layer neuron"]
    grads: Float[Tensor, "prompt layer neuron"]
    components: tuple[str, ...]
    outputs: Float[Tensor, "prompt component d_model"]
    final: Float[Tensor, "prompt d_model"]

    def select(self, layers: Sequence[int]) -> GridCapture:
        """The same capture restricted to some of its neuron layers (e.g. the ones that matter most)."""
        missing = [l for l in layers if l not in self.layers]
        if missing:
            raise FixableValueError(
                f"layers {missing} were not captured (this capture has {self.layers}). ", "capture them."
            )
        keep = sorted({int(l) for l in layers})
        idx = [self.layers.index(l) for l in keep]
        return dataclasses.replace(self, layers=tuple(keep), acts=self.acts[:, idx], grads=self.grads[:, idx])

    def direct_effect(self, model: HookedModel, tokens: Sequence[int]) -> Float[Tensor, "prompt component token"]:
        """Each component's exact direct effect on the logits of ``tokens``: ``(LN(x) − LN(x − c)) · W_U``."""
        structure = block_structure(model)
        norm = getattr(model.bridge, structure.final_norm)
        dev = model.output_device()  # where the final norm and the unembedding compute
        w_u = unembed_columns(model, torch.tensor(list(tokens), device=dev))[0].float()
        with torch.no_grad():
            full = norm(self.final.to(dev)).float()
            out = torch.zeros(len(self.a), len(self.components), len(tokens), device="cpu")  # the result
            for c in range(len(self.components)):
                without = norm((self.final - self.outputs[:, c]).to(dev)).float()
                out[:, c] = ((full - without) @ w_u).cpu()
        return out

    def answer_effect(self, model: HookedModel) -> Float[Tensor, "prompt component"]:
        """Each component's exact direct effect on each prompt's own answer logit (its first token)."""
        structure = block_structure(model)
        norm = getattr(model.bridge, structure.final_norm)
        dev = model.output_device()  # where the final norm and the unembedding compute
        w_u = unembed_columns(model, self.answer)[0].T.float()  # [prompt, d_model]
        with torch.no_grad():
            full = norm(self.final.to(dev)).float()
            out = torch.zeros(len(self.a), len(self.components), device="cpu")  # the result
            for c in range(len(self.components)):
                without = norm((self.final - self.outputs[:, c]).to(dev)).float()
                out[:, c] = ((full - without) * w_u).sum(-1).cpu()
        return out


def _component_hooks(model: HookedModel, heads: Sequence[tuple[int, int]], mlps: Sequence[int]) -> list[str]:
    names = [hooks.resid_post(model.spec.n_layers - 1)]
    names += sorted({hooks.z(l) for l, _ in heads}) + [hooks.mlp_out(l) for l in mlps]
    return names


def capture_grid(
    model: HookedModel,
    grid: PairSet,
    layers: Sequence[int] = (),
    heads: Sequence[tuple[int, int]] = (),
    mlps: Sequence[int] = (),
    attribution: bool = True,
    batch_size: int = 32,
) -> GridCapture:
    """Run the grid once: neuron activations (and gradients) of ``layers``, outputs of ``heads`` and ``mlps``.

    A head's output is ``z_h W_O[h]``; ``attribution`` costs one backward through the last position.
    """
    spec = model.spec
    layers = tuple(sorted({int(l) for l in layers}))
    for l, h in heads:
        spec.check_head(l, h)
    bad = [l for l in (*layers, *mlps) if not 0 <= l < spec.n_layers]
    if bad:
        raise FixableValueError(f"MLP layers {bad} are outside 0…{spec.n_layers - 1}. ", "name layers of this model.")
    n = len(grid)
    d_mlp = spec.d_mlp
    acts = torch.zeros(n, len(layers), d_mlp, device="cpu")
    grads = torch.zeros(n, len(layers), d_mlp, device="cpu")
    outputs = torch.zeros(n, len(heads) + len(mlps), spec.d_model, device="cpu")
    final = torch.zeros(n, spec.d_model, device="cpu")
    correct = torch.zeros(n, dtype=torch.bool, device="cpu")
    names = _component_hooks(model, heads, mlps) + [mlp_post(l) for l in layers]
    w_o = {l: head_out_weight(model, l) for l, _ in heads}  # [head, d_head, d_model], offloaded weights loaded
    answers = torch.tensor(grid.answer_token, device="cpu")
    for rows in grid_batches(grid, list(range(n)), batch_size):
        toks = torch.tensor([grid.tokens[i] for i in rows], device=model.device)
        run = SuffixRunner(model, toks, toks.shape[1] - 1, capture=names)
        ans = answers[rows].to(run.logits.device)  # where the answer is read out
        correct[rows] = (run.logits.argmax(-1) == ans).cpu()
        final[rows] = run.clean[names[0]][:, -1].float().cpu()
        for c, (l, h) in enumerate(heads):
            z = run.clean[hooks.z(l)][:, -1, h]
            outputs[rows, c] = (z @ w_o[l][h]).float().cpu()
        for c, l in enumerate(mlps):
            outputs[rows, len(heads) + c] = run.clean[hooks.mlp_out(l)][:, -1].float().cpu()
        for j, l in enumerate(layers):
            acts[rows, j] = run.clean[mlp_post(l)][:, -1].float().cpu()
        if attribution and layers:
            grads[rows] = _gradients(run, layers, ans).cpu()
    return GridCapture(
        a=torch.tensor(grid.a, device="cpu"),
        b=torch.tensor(grid.b, device="cpu"),
        result=torch.tensor([int(x) for x in grid.answers], device="cpu"),
        answer=answers,
        correct=correct,
        layers=layers,
        acts=acts,
        grads=grads,
        components=tuple([f"L{l}.H{h}" for l, h in heads] + [f"MLP {l}" for l in mlps]),
        outputs=outputs,
        final=final,
    )


def _gradients(run: SuffixRunner, layers: Sequence[int], ans: Tensor) -> Float[Tensor, "batch layer neuron"]:
    """``∂ logit(answer) / ∂ act`` of the neurons of ``layers`` at the last position (one backward)."""
    kept: dict[int, Tensor] = {}

    def keep(layer: int) -> Any:
        def hook(act: Tensor, hook: Any) -> Tensor:
            if not act.requires_grad:  # only when nothing upstream is in the graph (block 0, frozen weights)
                act = act.detach().requires_grad_(True)
            kept[layer] = act
            return act

        return hook

    first = min(layers)
    resid = run.resid_pre(first).detach().requires_grad_(True) if first > 0 else None  # the graph starts here
    logits = run.run_with_grad([(mlp_post(l), keep(l)) for l in layers], from_layer=first, resid=resid)
    target = logits.gather(-1, ans[:, None]).sum()
    grads = torch.autograd.grad(target, [kept[l] for l in layers], allow_unused=True)
    return torch.stack(
        [g[:, -1] if g is not None else torch.zeros_like(kept[l][:, -1]) for g, l in zip(grads, layers)], 1
    ).float()
