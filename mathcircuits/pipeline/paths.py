"""Every path inside a run folder, in one place (no other module spells a run-folder path).

Layout (one sub-folder per stage, each finished by a ``.done.json`` marker)::

    config.yaml  versions.json  .lock  .run.json (the folder's identity: the model it was created for)
    logs/      warnings.log (dependencies' warnings and log lines)  traceback-<stage>.txt (internal errors)
    data/      pairs_scored/  pairs_correct/  accuracy.csv
    identify/  patching_<op>.pt  patching_all.pt  key_components.json  effects_all.csv
    validate/  head_means.pt  knockout_<op>.pt/.csv  transfer.pt/.csv  control.pt/.csv  mlp_margin.pt  mlp_mediation.pt
               cross_operation.pt/.csv
    analyze/   attention_by_role.pt/.csv  attention_key_layers.pt/.csv  mlp_probes.pt/.csv  head_patterns.pt
    circuit/   circuit_<op>.json  faithfulness_<op>.json  graph_<op>.html  curve_<op>.html
    numbers/   spectra.pt/.csv  logit_spectra.pt/.csv  probes.pt/.csv  helix.pt/.csv  helix_patch.pt/.csv
               neurons.pt/.csv  neuron_types.csv
    finetune/  train_pairs/  heldout_pairs/  <mode>/{checkpoint-N/, final/, sft_result.json, log.jsonl, .settings}
    evaluate/  table.csv  eval_<label>.pt (one per model: held-out arithmetic, benchmarks)
    compare/   train_pairs/ validation_pairs/ test_pairs/  units/{base, sweep/.., final/..}/unit.json
               units/{comparison.json, progress.json}  sweep.csv  table.csv  pareto.csv  power.json
               figures/{pareto,deltas,sweep}.{html,png}
    report/    report.html  claims.json  figures/
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mathcircuits.data import Operation
from mathcircuits.data.templates import OperationOrAll
from mathcircuits.finetune import Mode

__all__ = [
    "RunPaths",
]

MARKER = ".done.json"
RUNNING = ".running.json"  # the fingerprint a stage is running for, while it runs (resume or clear)


@dataclass(frozen=True)
class RunPaths:
    """The files of one run folder."""

    root: Path

    def stage(self, name: str) -> Path:
        """The folder of stage ``name``."""
        return self.root / name

    def marker(self, name: str) -> Path:
        """The marker a stage writes last: its inputs' fingerprint and its summary."""
        return self.root / name / MARKER

    def running(self, name: str) -> Path:
        """The file a running stage keeps its fingerprint in (removed when it finishes)."""
        return self.root / name / RUNNING

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def versions(self) -> Path:
        return self.root / "versions.json"

    @property
    def lock(self) -> Path:
        return self.root / ".lock"

    @property
    def identity(self) -> Path:
        return self.root / ".run.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def warnings_log(self) -> Path:
        return self.logs / "warnings.log"

    @property
    def offload(self) -> Path:
        """Where accelerate keeps the layers a ``model.device_map`` offloads to disk (re-made at each load)."""
        return self.root / "offload"

    def traceback(self, stage: str) -> Path:
        """Where the traceback of an internal error in ``stage`` is kept."""
        return self.logs / f"traceback-{stage}.txt"

    # data
    @property
    def pairs_scored(self) -> Path:
        return self.root / "data" / "pairs_scored"

    @property
    def pairs_correct(self) -> Path:
        return self.root / "data" / "pairs_correct"

    @property
    def accuracy_csv(self) -> Path:
        return self.root / "data" / "accuracy.csv"

    # identify
    def patching(self, operation: OperationOrAll) -> Path:
        """Patching result of one operation, or of all patched operations (``"all"``)."""
        return self.root / "identify" / f"patching_{operation}.pt"

    @property
    def key_components(self) -> Path:
        return self.root / "identify" / "key_components.json"

    @property
    def effects_csv(self) -> Path:
        return self.root / "identify" / "effects_all.csv"

    # validate
    @property
    def head_means(self) -> Path:
        return self.root / "validate" / "head_means.pt"

    def knockout(self, operation: Operation, suffix: str = ".pt") -> Path:
        return self.root / "validate" / f"knockout_{operation}{suffix}"

    def transfer(self, suffix: str = ".pt") -> Path:
        return self.root / "validate" / f"transfer{suffix}"

    def control(self, suffix: str = ".pt") -> Path:
        return self.root / "validate" / f"control{suffix}"

    @property
    def mlp_margin(self) -> Path:
        return self.root / "validate" / "mlp_margin.pt"

    @property
    def mlp_mediation(self) -> Path:
        return self.root / "validate" / "mlp_mediation.pt"

    def cross_operation(self, suffix: str = ".pt") -> Path:
        return self.root / "validate" / f"cross_operation{suffix}"

    # analyze
    def attention(self, suffix: str = ".pt") -> Path:
        return self.root / "analyze" / f"attention_by_role{suffix}"

    def attention_layers(self, suffix: str = ".pt") -> Path:
        return self.root / "analyze" / f"attention_key_layers{suffix}"

    def probes(self, suffix: str = ".pt") -> Path:
        return self.root / "analyze" / f"mlp_probes{suffix}"

    @property
    def patterns(self) -> Path:
        return self.root / "analyze" / "head_patterns.pt"

    # circuit
    def circuit(self, operation: Operation) -> Path:
        return self.root / "circuit" / f"circuit_{operation}.json"

    def circuit_faithfulness(self, operation: Operation) -> Path:
        return self.root / "circuit" / f"faithfulness_{operation}.json"

    def circuit_graph(self, operation: Operation) -> Path:
        return self.root / "circuit" / f"graph_{operation}.html"

    def circuit_curve(self, operation: Operation) -> Path:
        return self.root / "circuit" / f"curve_{operation}.html"

    # numbers
    def numbers(self, name: str, suffix: str = ".pt") -> Path:
        """A result of the numbers stage: ``spectra``, ``logit_spectra``, ``probes``, ``helix``, ``helix_patch``,
        ``neurons`` (``.pt``), their tables (``.csv``) and ``neuron_types.csv``."""
        return self.root / "numbers" / f"{name}{suffix}"

    # finetune
    @property
    def train_pairs(self) -> Path:
        return self.root / "finetune" / "train_pairs"

    @property
    def heldout_pairs(self) -> Path:
        return self.root / "finetune" / "heldout_pairs"

    def mode(self, mode: Mode | str) -> Path:
        """Output folder of one fine-tuning mode (checkpoints, final/, sft_result.json, log.jsonl)."""
        return self.root / "finetune" / str(mode)

    def checkpoints(self, mode: Mode | str) -> list[Path]:
        """The ``checkpoint-N`` folders a mode's training left (to resume from)."""
        return sorted(self.mode(mode).glob("checkpoint-*"))

    def final(self, mode: Mode | str) -> Path:
        return self.mode(mode) / "final"

    def sft_result(self, mode: Mode | str) -> Path:
        return self.mode(mode) / "sft_result.json"

    # evaluate
    def eval_result(self, label: str) -> Path:
        return self.root / "evaluate" / f"eval_{label}.pt"

    @property
    def eval_table(self) -> Path:
        return self.root / "evaluate" / "table.csv"

    # compare
    def compare_pairs(self, split: str) -> Path:
        """The ``train``, ``validation`` or ``test`` pairs of the comparison (HF dataset folder)."""
        return self.root / "compare" / f"{split}_pairs"

    @property
    def compare_units(self) -> Path:
        """The units (``<phase>/<mode>/lr_<rate>/seed_<s>/unit.json``), ``comparison.json`` and ``progress.json``."""
        return self.root / "compare" / "units"

    @property
    def compare_progress(self) -> Path:
        """How many of the comparison's units are done (``done``, ``remaining``, ``total``)."""
        return self.compare_units / "progress.json"

    @property
    def comparison(self) -> Path:
        return self.compare_units / "comparison.json"

    @property
    def compare_sweep(self) -> Path:
        return self.root / "compare" / "sweep.csv"

    @property
    def compare_table(self) -> Path:
        return self.root / "compare" / "table.csv"

    @property
    def compare_points(self) -> Path:
        """One row per trained unit: math gain and generic change against base (the Pareto figure's data)."""
        return self.root / "compare" / "pareto.csv"

    @property
    def compare_power(self) -> Path:
        return self.root / "compare" / "power.json"

    def compare_figure(self, name: str) -> Path:
        """A comparison figure (``pareto``, ``deltas``, ``sweep``) as HTML (static formats beside it)."""
        return self.root / "compare" / "figures" / f"{name}.html"

    # report
    @property
    def report(self) -> Path:
        return self.root / "report" / "report.html"

    @property
    def claims(self) -> Path:
        """The claims card (C1–C6 with verdicts) the report stage writes."""
        return self.root / "report" / "claims.json"

    def figure(self, name: str) -> Path:
        """A figure's path without extension (the saver adds .html, .png, ...)."""
        return self.root / "report" / "figures" / name
