"""Stage ``numbers``: how numbers are represented and combined — spectra, probes, helix, heuristic neurons.

Reads the ``numbers`` section and the key components of identify (its key MLPs are the
neuron layers, its key heads are mapped over the grid); writes ``numbers/spectra``,
``logit_spectra``, ``probes``, ``helix``, ``helix_patch`` and ``neurons`` (``.pt`` results and
``.csv`` tables) and ``neuron_types.csv``. A causal part the model cannot be tested on (it
answers too few prompts correctly) is skipped and the summary says why. Off by default:
on the embedded model on a 2-core CPU it takes minutes (docs/numbers.md gives the time).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from mathcircuits._errors import FixableValueError
from mathcircuits.numbers import (
    TooFewCorrect,
    capture_grid,
    fit_helix,
    helix_patch,
    heuristic_neurons,
    logit_spectra,
    mod_probes,
    number_contexts,
    number_spectra,
    number_states,
    operand_grid,
)
from mathcircuits.patching import KeyComponents
from mathcircuits.pipeline.context import Context, StageSummary, save_csv

__all__: list[str] = []


@dataclass(frozen=True)
class Skip:
    """A causal part the stage skipped: what the model cannot do, and what to change; prints as one message."""

    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.problem}. Fix: {self.fix}"


@dataclass(frozen=True)
class NumbersSummary(StageSummary):
    """Where numbers are read, the periods above the null per layer band, κ at the best depth, helix and neurons."""

    disabled: bool = False
    reading: str = ""
    bands: dict[str, list[float]] = field(default_factory=dict)
    baseline_periods: list[float] = field(default_factory=list)
    kappa: dict[str, str] = field(default_factory=dict)
    helix: str = ""
    patch: str = ""
    neurons: str = ""
    skipped: dict[str, Skip] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        if self.disabled:
            return ["  numbers: skipped (numbers.enabled is false)"]
        out = [f"  reading: {self.reading}"]
        out += [
            f"  periods above the null, {band}: {', '.join(f'{p:g}' for p in ps) or 'none'}"
            for band, ps in self.bands.items()
        ]
        out.append(
            f"  periods of the tokenizer baseline: {', '.join(f'{p:g}' for p in self.baseline_periods) or 'none'}"
        )
        out += [f"  probe {t}: {v}" for t, v in self.kappa.items()]
        out += [
            f"  helix: {self.helix}",
            f"  helix patch: {self.patch or 'skipped'}",
            f"  neurons: {self.neurons or 'skipped'}",
        ]
        out += [f"  skipped {k}: {v}" for k, v in self.skipped.items()]
        out += [f"  note: {n}" for n in self.notes]
        out.append("  time: " + ", ".join(f"{k} {v:.0f} s" for k, v in self.timings.items()))
        return out


def _neuron_layers(ctx: Context, key: KeyComponents) -> tuple[int, ...]:
    c, n_layers = ctx.config.numbers, ctx.model.spec.n_layers
    if c.neuron_layers is not None:
        bad = [l for l in c.neuron_layers if not 0 <= l < n_layers]
        if bad:
            raise FixableValueError(
                f"numbers.neuron_layers {bad} are outside 0…{n_layers - 1}. ", "name this model's layers."
            )
        return tuple(c.neuron_layers)
    if n_layers <= 4:
        return tuple(range(n_layers))
    if key.mlps:
        return tuple(sorted(key.mlps))
    raise FixableValueError(
        "identify selected no key MLP, so the neuron analysis has no layers. ",
        "set numbers.neuron_layers (e.g. [18, 20, 22]), or a selection rule that keeps MLPs.",
    )


def run(ctx: Context) -> NumbersSummary:
    """Number states → spectra, probes, helix and its patch; operand grid → logit spectra and heuristic neurons.

    Args:
        ctx: the run context.

    Returns:
        The stage summary.
    """
    c, paths = ctx.config.numbers, ctx.paths
    if not c.enabled:
        return NumbersSummary(disabled=True)
    model = ctx.model
    key = KeyComponents.load(paths.key_components)
    key.check_model(model.spec)
    sets = ctx.templates()
    times: dict[str, float] = {}
    skipped: dict[str, Skip] = {}
    t0 = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t0
        times[name] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()

    def save(name: str, result: Any) -> None:
        result.save(paths.numbers(name))
        save_csv(result.to_dataframe(), paths.numbers(name, ".csv"))

    kw = {"uncertainty": c.uncertainty()}
    contexts = number_contexts(model.tokenizer, sets, c.context_operations, c.contexts, first=c.template)
    notes = []
    if len(contexts) < c.contexts:  # a cap, never silent: the templates give no more distinct contexts
        notes.append(
            f"{len(contexts)} contexts of the {c.contexts} asked for (numbers.contexts): the templates of "
            f"numbers.context_operations give no more"
            + (f"; the probes use {len(contexts)} folds, not {c.probe_folds}" if len(contexts) < c.probe_folds else "")
        )
    states = number_states(model, range(c.numbers[0], c.numbers[1] + 1), contexts, c.batch_size)
    lap("states")
    spectra = number_spectra(states, n_shuffles=c.n_shuffles, **kw)
    save("spectra", spectra)
    lap("spectra")
    probes = mod_probes(states, c.periods, c.probe_folds, **kw)
    save("probes", probes)
    lap("probes")
    helix = fit_helix(states, c.periods, **kw)
    save("helix", helix)
    lap("helix")
    n_layers = model.spec.n_layers
    depths = c.patch_depths or tuple(dict.fromkeys(d for d in (helix.best_depth, n_layers // 2) if 1 <= d < n_layers))
    patch_text = ""
    try:
        patch = helix_patch(model, helix, sets, depths=depths, config=c)
        save("helix_patch", patch)
        patch_text = patch.headline()
    except TooFewCorrect as err:
        skipped["helix patch"] = Skip(err.problem, err.fix)
    lap("helix patch")
    grid = operand_grid(model.tokenizer, sets, c.template, c.grid)
    layers = _neuron_layers(ctx, key)
    heads = list(key.heads[:4])
    cap = capture_grid(model, grid, layers, heads, mlps=sorted(key.mlps)[:4], batch_size=c.batch_size)
    lap("grid")
    if cap.components:
        save("logit_spectra", logit_spectra(model, cap, n_shuffles=c.n_shuffles, **kw))
    lap("logit spectra")
    neuron_text = ""
    try:
        neurons = heuristic_neurons(model, grid, layers, heads, capture=cap, config=c)
        save("neurons", neurons)
        save_csv(neurons.type_table(), paths.numbers("neuron_types", ".csv"))
        neuron_text = neurons.headline()
    except TooFewCorrect as err:
        skipped["neurons"] = Skip(err.problem, err.fix)
    lap("neurons")
    kappa = {}
    for t in probes.targets:
        b = probes.best(t)
        kappa[t] = (
            f"{b['score'].format('{:.2f}')} at depth {b['depth']} (depth 0: {b['depth0'].format('{:.2f}')}; "
            f"control: {b['control'].format('{:.2f}')})"
        )
    return NumbersSummary(
        reading=states.reading,
        bands={k: list(v) for k, v in spectra.bands().items()},
        baseline_periods=list(spectra.baseline_periods),
        kappa=kappa,
        helix=helix.headline(),
        patch=patch_text,
        neurons=neuron_text,
        skipped=skipped,
        timings=times,
        notes=notes,
    )
