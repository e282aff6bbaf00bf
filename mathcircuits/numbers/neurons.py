"""Heuristic neurons (Nikankin et al., ICLR 2025): types, the smallest sufficient top-k per layer, matched knockout.

Nikankin et al. find that about 1% of the MLP neurons per layer explain a model's arithmetic, each a simple
heuristic (:mod:`.heuristics`), and that knocking out the neurons *associated* with a prompt hurts it more than
knocking out as many other neurons. Measured on one operation's operand grid, at the last position:

1. **Attribution.** ``|∂logit/∂act · (mean − act)|`` (mean ablation linearised), averaged over the prompts the
   model answers correctly; the mean is the neuron's over the whole grid.
2. **Types.** Every analysed neuron is matched to the patterns of :mod:`.heuristics`; the type table counts them
   among each layer's sufficient top-k, beside the count the rule gives on shuffled activations.
3. **Smallest sufficient top-k.** For each layer alone, keep its ``k`` neurons of highest attribution and
   mean-ablate the rest; the smallest tried ``k`` whose accuracy (first answer token, Wilson interval) on the
   correct prompts stays at or above ``1 − margin`` is the layer's. ``k = 0`` is always tried: a layer that keeps
   accuracy without any of its neurons is not needed, and its sufficient ``k`` is 0.
4. **Associated vs random knockout.** A prompt's associated neurons are those of the sufficient top-k whose
   heuristic applies to it (fires on the pattern and the prompt matches, or fires off it and it does not).
   Mean-ablating them in all layers at once is compared with ablating, per prompt and layer, as many random
   non-associated neurons of the same layer (``n_random ≥ 20`` draws): the extra drop (random − associated
   accuracy, per prompt) gets a paired bootstrap interval over prompts; the draws' accuracies give a band.

Example::

    res = heuristic_neurons(model, grid, layers=[18, 20, 22])
    res.type_table(), res.topk, res.knockout

Reference: Nikankin, Reusch, Mueller & Belinkov, "Arithmetic Without Algorithms" (ICLR 2025), §3–5.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from mathcircuits._errors import FixableValueError
from mathcircuits._io import SavedResult
from mathcircuits._schema import configured, given
from mathcircuits.data import Operation, PairSet
from mathcircuits.models import HookedModel, SuffixRunner
from mathcircuits.numbers.ablation import LayerTopK, NeuronKnockout, ablate, random_like, summarise_knockout
from mathcircuits.numbers.config import NumbersConfig
from mathcircuits.numbers.grid import GridCapture, capture_grid, grid_batches
from mathcircuits.numbers.heuristics import HEURISTIC_KINDS, heuristic_library, match_patterns, null_classified
from mathcircuits.numbers.results import TooFewCorrect
from mathcircuits.stats import Uncertainty
from mathcircuits.stats.interval import wilson_interval

__all__ = [
    "NeuronResult",
    "heuristic_neurons",
]

DEFAULT_FRACTIONS = NumbersConfig().topk_fractions  #: the config's, declared there


@dataclass(frozen=True, repr=False)
class NeuronResult(SavedResult):
    """Heuristic neurons of one operation's grid (see the module docstring).

    ``a_values``/``b_values`` are the heatmap rows/columns; ``n_correct`` counts prompts answered right (first answer
    token). ``attribution`` (mean |attribution|), ``pattern`` (index into ``labels``, −1 unclassified) and ``corr``
    (with the best pattern) are ``[layer, neuron]``; ``null_counts`` are per layer on shuffled activations.
    ``combined`` is the accuracy with every layer at its sufficient top-k at once ``(value, low, high)``;
    ``knockout`` is None when no prompt has an associated neuron. ``example_maps`` are ``[example, a, b]`` (NaN where
    the grid has no prompt), ``head_maps`` the heads' direct logit contributions ``[head, a, b]``.
    """

    operation: Operation
    template: str
    a_values: tuple[int, ...]
    b_values: tuple[int, ...]
    layers: tuple[int, ...]
    d_mlp: int
    n_prompts: int
    n_correct: int
    clean_accuracy: float
    attribution: Float[Tensor, "layer neuron"]
    pattern: Int[Tensor, "layer neuron"]
    corr: Float[Tensor, "layer neuron"]
    labels: tuple[str, ...]
    label_kinds: tuple[str, ...]
    label_operands: tuple[str, ...]
    null_counts: Float[Tensor, " layer"]
    min_corr: float
    margin: float
    topk: tuple[LayerTopK, ...]
    combined: tuple[float, float, float]
    knockout: NeuronKnockout | None
    example_neurons: tuple[tuple[int, int], ...]
    example_labels: tuple[str, ...]
    example_maps: Float[Tensor, "example a b"]
    head_labels: tuple[str, ...]
    head_maps: Float[Tensor, "head a b"]
    reading: str
    seed: int = 0

    STAGE = "numbers"

    def top(self, j: int) -> Tensor:
        """Indices of layer ``layers[j]``'s sufficient top-k neurons (by attribution)."""
        return self.attribution[j].argsort(descending=True)[: self.topk[j].chosen]

    def type_table(self, top_only: bool = True) -> pd.DataFrame:
        """Neuron counts per layer and heuristic kind, among each layer's sufficient top-k (or all neurons).

        Columns: ``layer``, ``k``, one per kind (``range`` split by operand), ``unclassified``, and
        ``null classified`` (all neurons, shuffled activations).
        """
        cols = ["range a", "range b", "range result", *[k for k in HEURISTIC_KINDS if k != "range"], "unclassified"]
        recs = []
        for j, layer in enumerate(self.layers):
            idx = self.top(j) if top_only else torch.arange(self.d_mlp, device="cpu")
            row = {"layer": layer, "k": len(idx), **{c: 0 for c in cols}}
            for p in self.pattern[j, idx].tolist():
                if p < 0:
                    row["unclassified"] += 1
                elif self.label_kinds[p] == "range":
                    row[f"range {self.label_operands[p]}"] += 1
                else:
                    row[self.label_kinds[p]] += 1
            row["null classified"] = float(self.null_counts[j])
            recs.append(row)
        return pd.DataFrame(recs)

    def headline(self) -> str:
        ks = ", ".join(f"L{t.layer}:{t.chosen}" for t in self.topk)
        ko = self.knockout
        drop = f"; extra drop {ko.drop.value:+.2f} [{ko.drop.low:+.2f}, {ko.drop.high:+.2f}]" if ko else ""
        return (
            f"{self.operation} grid {len(self.a_values)}x{len(self.b_values)}; sufficient k {ks} of {self.d_mlp}{drop}"
        )

    def to_dataframe(self) -> pd.DataFrame:
        """One row per layer: sufficient k, its share and accuracy, and the type counts among the top-k."""
        table = self.type_table()
        table["share"] = table["k"] / self.d_mlp
        accs = []
        for t in self.topk:
            i = t.ks.index(t.chosen) if t.chosen in t.ks else None
            accs.append((t.accuracy[i], t.low[i], t.high[i]) if i is not None else (math.nan,) * 3)
        table["accuracy"], table["low"], table["high"] = zip(*accs)
        return table


def _maps(values: Tensor, cap: GridCapture, a_vals: list[int], b_vals: list[int]) -> Tensor:
    out = torch.full((values.shape[0], len(a_vals), len(b_vals)), float("nan"), device="cpu")
    ai = torch.tensor([a_vals.index(int(x)) for x in cap.a], device="cpu")
    bi = torch.tensor([b_vals.index(int(x)) for x in cap.b], device="cpu")
    out[:, ai, bi] = values.float()
    return out


def heuristic_neurons(
    model: HookedModel,
    grid: PairSet,
    layers: Sequence[int],
    heads: Sequence[tuple[int, int]] = (),
    fractions: Sequence[float] | None = None,
    margin: float | None = None,
    min_corr: float | None = None,
    n_random: int | None = None,
    eval_prompts: int | None = None,
    batch_size: int | None = None,
    n_examples: int = 4,
    capture: GridCapture | None = None,
    uncertainty: Uncertainty | None = None,
    *,
    config: NumbersConfig | None = None,
) -> NeuronResult:
    """Attribution, heuristic types, the sufficient top-k per layer and matched knockout on an operand grid.

    ``fractions`` are the shares of a layer's neurons tried as top-k; ``eval_prompts`` caps the correct prompts that
    score the ablations; ``n_examples`` neurons (highest attribution among the classified) are shown as heatmaps;
    ``capture`` reuses a :class:`GridCapture` of this grid with ``layers`` and ``heads``. ``uncertainty``'s seed also
    draws the evaluation prompts, the random knockouts and the pattern null. ``config``: the settings (a run's
    ``numbers`` section; None: the defaults of :class:`NumbersConfig`), of which it reads ``topk_fractions``,
    ``accuracy_margin``, ``min_corr``, ``n_random_knockouts``, ``eval_prompts``, ``batch_size``, ``n_boot`` and
    ``seed`` (:meth:`NumbersConfig.uncertainty`); ``fractions``, ``margin``, ``min_corr``, ``n_random``,
    ``eval_prompts``, ``batch_size`` and ``uncertainty`` replace them when given.
    """
    if n_random is not None and n_random < 20:
        raise FixableValueError(
            f"n_random={n_random}: the random knockout needs at least 20 draws. ", "n_random >= 20."
        )
    cfg = configured(
        "heuristic_neurons", NumbersConfig, config,
        **given(topk_fractions=fractions, accuracy_margin=margin, min_corr=min_corr, n_random_knockouts=n_random,
                eval_prompts=eval_prompts, batch_size=batch_size),
    )  # fmt: skip
    fractions, margin, min_corr, n_random = (
        cfg.topk_fractions,
        cfg.accuracy_margin,
        cfg.min_corr,
        cfg.n_random_knockouts,
    )
    eval_prompts, batch_size = cfg.eval_prompts, cfg.batch_size
    uncertainty = cfg.uncertainty() if uncertainty is None else uncertainty
    confidence, seed = uncertainty.confidence, uncertainty.seed
    layers = tuple(sorted({int(l) for l in layers}))
    if not layers:
        raise FixableValueError("no MLP layers to analyse. ", "pass layers, e.g. the key MLPs of the identify stage.")
    cap = capture or capture_grid(model, grid, layers, heads, batch_size=batch_size)
    if cap.layers != layers:
        raise FixableValueError(f"the capture holds layers {cap.layers}, not {layers}. ", "capture the same layers.")
    d_mlp, n = model.spec.d_mlp, len(cap.a)
    correct = cap.correct.nonzero()[:, 0]
    if len(correct) < 5:
        raise TooFewCorrect(
            f"the model answers only {len(correct)} of {n} grid prompts correctly, too few to ablate",
            "use operands the model solves (a smaller operand range).",
        )
    means = cap.acts.mean(0)  # [layer, neuron]
    attribution = (cap.grads * (means - cap.acts)).abs()[correct].mean(0)
    lib = heuristic_library(cap.a, cap.b, cap.result)
    masks = torch.stack([h.mask(cap.a, cap.b, cap.result) for h in lib])
    best = torch.full((len(layers), d_mlp), -1, dtype=torch.long, device="cpu")
    corr = torch.zeros(len(layers), d_mlp, device="cpu")
    null = torch.zeros(len(layers), device="cpu")
    for j in range(len(layers)):
        b, r = match_patterns(cap.acts[:, j].T, masks)
        best[j], corr[j] = torch.where(r.abs() >= min_corr, b, -1), r
        null[j] = null_classified(cap.acts[:, j].T, masks, min_corr, seed=seed + j)
    used = sorted({int(p) for p in best.flatten() if p >= 0})
    remap = torch.full((len(lib) + 1,), -1, dtype=torch.long, device="cpu")
    remap[torch.tensor(used, dtype=torch.long, device="cpu")] = torch.arange(len(used), device="cpu")
    pattern = torch.where(best >= 0, remap[best.clamp_min(0)], -1)
    gen = torch.Generator().manual_seed(seed)
    evals = correct[torch.randperm(len(correct), generator=gen)[:eval_prompts]].sort().values.tolist()
    # k = 0 (the whole layer mean-ablated) is the baseline: a layer that keeps accuracy without any neuron is not
    # needed, and its "sufficient share" says nothing (claim N3 leaves it out)
    ks = [0, *sorted({min(d_mlp, max(1, math.ceil(f * d_mlp))) for f in fractions})]
    order = attribution.argsort(1, descending=True)
    mean_of = {l: means[j] for j, l in enumerate(layers)}
    # 3. per layer and k: accuracy with only the top-k kept
    hits = torch.zeros(len(layers), len(ks), device="cpu")
    batches = grid_batches(grid, evals, batch_size)
    runners = []
    for bi, rows in enumerate(batches):
        toks = torch.tensor([grid.tokens[i] for i in rows], device=model.device)
        run = SuffixRunner(model, toks, toks.shape[1] - 1, check=bi == 0)
        ans = cap.answer[rows].to(run.logits.device)  # where the answers are read out
        for j, l in enumerate(layers):
            for ki, k in enumerate(ks):
                drop = torch.ones(d_mlp, dtype=torch.bool, device="cpu")
                drop[order[j, :k]] = False
                logits = run.run(ablate({l: drop}, mean_of), from_layer=l)
                hits[j, ki] += float((logits.argmax(-1) == ans).sum())
        runners.append((rows, run, ans))
    topk = []
    for j, l in enumerate(layers):
        ivs = [wilson_interval(int(h), len(evals), confidence) for h in hits[j].tolist()]
        ok = [k for k, iv in zip(ks, ivs) if iv.value >= 1 - margin]
        topk.append(
            LayerTopK(
                l,
                tuple(ks),
                tuple(iv.value for iv in ivs),
                tuple(iv.low for iv in ivs),
                tuple(iv.high for iv in ivs),
                ok[0] if ok else d_mlp,
            )
        )
    keep = {l: torch.zeros(d_mlp, dtype=torch.bool, device="cpu") for l in layers}
    for j, l in enumerate(layers):
        keep[l][order[j, : topk[j].chosen]] = True
    # 4. every layer at its sufficient k at once, and the associated vs random knockout
    fires = (masks[best.clamp_min(0)] == (corr > 0)[..., None]) & (best >= 0)[..., None]  # [layer, neuron, cell]
    assoc = fires.permute(2, 0, 1) & torch.stack([keep[l] for l in layers])[None]  # [cell, layer, neuron]
    combined_hits = 0.0
    per_prompt = {"assoc": [], "random": []}
    for rows, run, ans in runners:
        first = min(layers)
        logits = run.run(ablate({l: ~keep[l] for l in layers}, mean_of), from_layer=first)
        combined_hits += float((logits.argmax(-1) == ans).sum())
        a_mask = assoc[rows]  # [batch, layer, neuron]
        with_any = a_mask.flatten(1).any(1)
        if not bool(with_any.any()):
            continue
        sub = with_any.nonzero()[:, 0]
        got = run.run(ablate({l: a_mask[:, j] for j, l in enumerate(layers)}, mean_of), from_layer=first)
        per_prompt["assoc"].append(((got.argmax(-1) == ans).float().cpu()[sub], a_mask[sub].sum((1, 2)).float()))
        draws = torch.zeros(len(rows), n_random, device="cpu")
        for r in range(n_random):
            rand = random_like(a_mask, gen)
            got = run.run(ablate({l: rand[:, j] for j, l in enumerate(layers)}, mean_of), from_layer=first)
            draws[:, r] = (got.argmax(-1) == ans).float().cpu()
        per_prompt["random"].append(draws[sub])
    cb = wilson_interval(int(combined_hits), len(evals), confidence)
    knockout = summarise_knockout(per_prompt, n_random, uncertainty) if per_prompt["assoc"] else None
    a_vals, b_vals = sorted(set(cap.a.tolist())), sorted(set(cap.b.tolist()))
    classified = [(float(attribution[j, i]), j, i) for j in range(len(layers)) for i in range(d_mlp) if best[j, i] >= 0]
    examples = [(j, i) for _, j, i in sorted(classified, reverse=True)[:n_examples]]
    ex_maps = _maps(
        torch.stack([cap.acts[:, j, i] for j, i in examples]) if examples else torch.zeros(0, n, device="cpu"),
        cap,
        a_vals,
        b_vals,
    )
    heads_effect = cap.answer_effect(model)[:, : len(heads)] if heads else torch.zeros(n, 0, device="cpu")
    return NeuronResult(
        operation=str(grid.operations[0]),
        template=str(grid.template_ids[0]),
        a_values=tuple(a_vals),
        b_values=tuple(b_vals),
        layers=layers,
        d_mlp=d_mlp,
        n_prompts=n,
        n_correct=len(correct),
        clean_accuracy=len(correct) / n,
        attribution=attribution,
        pattern=pattern,
        corr=corr,
        labels=tuple(lib[p].label for p in used),
        label_kinds=tuple(lib[p].kind for p in used),
        label_operands=tuple(lib[p].operand for p in used),
        null_counts=null,
        min_corr=min_corr,
        margin=margin,
        topk=tuple(topk),
        combined=(cb.value, cb.low, cb.high),
        knockout=knockout,
        example_neurons=tuple((layers[j], i) for j, i in examples),
        example_labels=tuple(lib[int(best[j, i])].label for j, i in examples),
        example_maps=ex_maps,
        head_labels=tuple(cap.components[: len(heads)]),
        head_maps=_maps(heads_effect.T, cap, a_vals, b_vals),
        reading="neuron activations (the input of W_out) at the prompt's last position; answers scored on their "
        "first token",
        seed=seed,
    )
