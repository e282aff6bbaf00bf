"""The run configuration: one value that describes a whole run, loadable from YAML or TOML.

Its sections *are* the library's config dataclasses (``patching`` is
:class:`~mathcircuits.patching.config.PatchingConfig`, ``finetune`` is
:class:`~mathcircuits.finetune.SFTConfig` plus the fields the stage needs, ...),
so a stage hands its section to the library unchanged. Every field has a type,
a range or a set of choices and one default, all checked when the config is
built (:mod:`mathcircuits._schema`): a typo or a missing model path fails at
load, before anything is written. ``mathcircuits config --show`` prints the
whole schema.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import tomllib
import torch
import yaml

from mathcircuits._io import StrictYAMLError, atomic_path, load_yaml
from mathcircuits._schema import ConfigError, check_fields, describe, from_dict, plain, setting
from mathcircuits.ablation.config import ValidationConfig
from mathcircuits.analysis.config import AnalysisConfig
from mathcircuits.circuit.config import CircuitConfig
from mathcircuits.data import Fact, GenerationConfig, load_templates
from mathcircuits.evaluation.benchmarks import benchmark_spec
from mathcircuits.evaluation.config import EvaluationConfig
from mathcircuits.finetune import CompareConfig, Mode, SFTConfig
from mathcircuits.models import ModelSpec, resolve_source
from mathcircuits.numbers import NumbersConfig
from mathcircuits.patching.config import PatchingConfig, SelectionConfig
from mathcircuits.pipeline.facts import FactStage, stage_facts

__all__ = [
    "ConfigError",
    "DataSection",
    "FinetuneSection",
    "ModelSection",
    "RunConfig",
    "fingerprint",
    "render_config",
]


def _benchmark_kind(name: str) -> str | None:
    """A benchmark's kind (``"choice"``, ``"generate"``, …), or None for a name the registry does not know."""
    try:
        return benchmark_spec(name).kind
    except KeyError:
        return None  # the evaluation section names it in its own error


def _check_device(device: str) -> None:
    """Refuse a device this torch cannot use (e.g. ``cuda`` on a CPU build), naming what is available."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ConfigError(f"model.device={device!r} is not a torch device. Fix: use cpu, cuda or cuda:N.") from err
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if not available.get(dev.type, False):
        have = [d for d, ok in available.items() if ok]
        raise ConfigError(
            f"model.device={device!r}, but this torch ({torch.__version__}) has no usable {dev.type} device. "
            f"Fix: use one of {have}."
        )
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(
            f"model.device={device!r}, but only {torch.cuda.device_count()} CUDA devices are visible. "
            f"Fix: use cuda:0 … cuda:{torch.cuda.device_count() - 1}."
        )


@dataclass(frozen=True)
class ModelSection:
    """Which model to load, where and how (``load_model``'s arguments)."""

    source: str = setting(
        "embedded", "embedded | gemma3-270m | tiny-llama | tiny-<family> | HF folder | .gguf file | Hub id"
    )
    device: str = setting("cpu", "torch device, e.g. cpu or cuda")
    dtype: Literal["float32", "float16", "bfloat16"] = setting("float32", "weights' dtype")
    device_map: Literal["", "auto", "balanced", "balanced_low_0", "sequential"] = setting(
        "", "'': the whole model on `device`; else accelerate splits it over the GPUs (CPU/disk offload beyond)"
    )
    threads: int = setting(0, "torch threads; 0: leave torch's default", ge=0)
    fast_paths: Literal["on", "off"] = setting(
        "on", "on: fast paths, each checked against its plain path on this model first; off: plain paths only"
    )

    def __post_init__(self) -> None:
        check_fields(self)
        _check_device(self.device)
        if self.device_map and self.source.startswith("tiny-"):
            raise ConfigError(
                f"model.device_map={self.device_map!r} needs a model loaded from files, but {self.source!r} is built "
                "in memory. Fix: leave device_map empty, or save the model with save_pretrained and give its folder."
            )
        try:
            resolve_source(self.source)  # a path that does not exist fails here, before any output
        except FileNotFoundError as err:
            raise ConfigError(
                f"source={self.source!r}: {str(err).split(' Fix:')[0].rstrip('. ')}. "
                "Fix: give an existing HF folder or .gguf file, or embedded / gemma3-270m / tiny-llama / tiny-gpt2."
            ) from err


@dataclass(frozen=True)
class DataSection(GenerationConfig):
    """:class:`~mathcircuits.data.GenerationConfig` plus where templates come from and the correctness filter."""

    template_files: tuple[str, ...] = setting((), "template files; empty: every file in data_templates/")
    keep_only_correct: bool = setting(True, "the paper's filter; false only for random test models")
    heldout_templates: tuple[str, ...] = setting(
        (), "templates scored but never used to find key heads; validate measures transfer to them (claim C5)"
    )
    stage_fact_shares: tuple[float, float, float, float] = setting(
        (0.35, 0.35, 0.1, 0.2),
        "shares of each operation's facts (op, a, b) owned by identify, validate, analyze and circuit: disjoint "
        "parts, seeded by data.seed, so no stage scores a fact another stage used (pipeline/facts.py)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        shares = self.stage_fact_shares
        if any(not x > 0 for x in shares) or sum(shares) > 1 + 1e-9:
            raise ConfigError(
                f"data.stage_fact_shares={list(shares)}. Fix: four positive shares (identify, validate, analyze, "
                "circuit) summing to at most 1, e.g. [0.35, 0.35, 0.1, 0.2]."
            )
        try:
            self.stage_facts()  # every stage gets facts of every operation (checked now, not in the data stage)
        except ValueError as err:
            raise ConfigError(f"data.stage_fact_shares: {err}") from err
        # the templates exist and make pairs of these operations (checked now, not when the data stage runs)
        try:
            loaded = load_templates(list(self.template_files) if self.template_files else None)
        except (OSError, ValueError) as err:
            raise ConfigError(f"data.template_files: {' '.join(str(err).split())}") from err
        known = {t.id for s in loaded for t in s.templates if t.operation in self.operations}
        unknown = [t for t in (*(self.template_ids or ()), *self.heldout_templates) if t not in known]
        if unknown:
            raise ConfigError(
                f"data.template_ids / heldout_templates name {unknown}, which are not templates of operations "
                f"{list(self.operations)}. Fix: choose from {sorted(known)}."
            )
        ids = self.template_ids
        missing = [t for t in self.heldout_templates if ids is not None and t not in ids]
        if missing:
            raise ConfigError(
                f"data.heldout_templates has {missing}, which data.template_ids does not generate. "
                "Fix: add them to data.template_ids, or remove them from data.heldout_templates."
            )
        if ids is not None and set(ids) <= set(self.heldout_templates):
            raise ConfigError(
                "data.heldout_templates holds out every template, so none is left to find key heads on. "
                "Fix: hold out fewer templates."
            )

    def generation(self) -> GenerationConfig:
        """The library config alone (without the pipeline's extra fields)."""
        fields = {f.name for f in dataclasses.fields(GenerationConfig)}
        return GenerationConfig(**{k: getattr(self, k) for k in fields})

    def stage_facts(self) -> dict[FactStage, frozenset[Fact]]:
        """The declared partition of the facts by stage (:func:`~mathcircuits.pipeline.facts.stage_facts`)."""
        return stage_facts(self.generation(), self.stage_fact_shares)


@dataclass(frozen=True)
class FinetuneSection(SFTConfig):
    """:class:`~mathcircuits.finetune.SFTConfig` plus the modes compared and their training data.

    ``mode``, ``include_mlps`` and ``progress_bar`` are set by the stage (one run per entry of ``modes``):
    one definition of "precise" everywhere — ``precise`` and ``precise@K`` tune heads only, a ``+mlp``
    suffix adds the key MLPs (and says so in every table and claim).
    """

    HIDDEN: ClassVar[tuple[str, ...]] = ("mode", "include_mlps", "progress_bar")

    enabled: bool = setting(True, "run the finetune stage")
    modes: tuple[Mode, ...] = setting(
        (Mode("precise"), Mode("full")),
        "precise: key heads only; precise+mlp: key heads and key MLPs; full: every parameter; precise@K[+mlp]: top-K",
    )
    train_pairs_per_template: int = setting(16, "training pairs per template", ge=1)
    operand_range: tuple[int, int] = setting((1, 20), "operand range of the training pairs")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.enabled and not self.modes:
            raise ConfigError("finetune.modes is empty. Fix: list modes, e.g. [precise, full], or set enabled: false.")
        bad = [str(m) for m in self.modes if m.kind not in ("precise", "full")]
        if bad:
            raise ConfigError(
                f"finetune modes {bad} are unknown. "
                "Fix: use 'precise', 'precise+mlp', 'full', 'precise@K' or 'precise@K+mlp' (K heads, e.g. precise@16)."
            )

    def sft(self, mode: Mode | str, progress: bool) -> SFTConfig:
        """The library config of one mode's run (its SFT method, and this section's training settings)."""
        fields = {f.name for f in dataclasses.fields(SFTConfig)}
        values = {k: getattr(self, k) for k in fields}
        mode = Mode.parse(mode)
        return SFTConfig(**{**values, "mode": mode.method, "include_mlps": mode.mlps, "progress_bar": progress})


@dataclass(frozen=True)
class RunConfig:
    """One whole run: a section per concern, each a checked library config."""

    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    patching: PatchingConfig = field(default_factory=PatchingConfig)
    selection: SelectionConfig = field(default_factory=SelectionConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    circuit: CircuitConfig = field(default_factory=CircuitConfig)
    numbers: NumbersConfig = field(default_factory=NumbersConfig)
    finetune: FinetuneSection = field(default_factory=FinetuneSection)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    compare: CompareConfig = field(default_factory=CompareConfig)

    def __post_init__(self) -> None:
        # checks across sections, before a run writes anything (a stage would otherwise stop half-way)
        if self.compare.enabled:
            not_choice = [b for b in self.evaluation.benchmarks if _benchmark_kind(b) not in ("choice", None)]
            if not_choice:
                raise ConfigError(
                    f"compare.enabled is true and evaluation.benchmarks has {not_choice}, which are not likelihood "
                    "(multiple-choice) benchmarks; the compare stage scores generic ability by likelihood. Fix: list "
                    "choice benchmarks only (ARC-Easy, ARC-Challenge, BoolQ, OpenBookQA, MMLU, CommonsenseQA), or "
                    "turn compare off."
                )

    @staticmethod
    def sections() -> dict[str, type]:
        """Section name → its config class, in file order."""
        return {f.name: f.default_factory for f in dataclasses.fields(RunConfig)}  # type: ignore[misc]

    def to_dict(self) -> dict[str, Any]:
        """Plain values (tuples as lists) of the settable fields, as written to config.yaml."""
        d = plain(self)
        for name, sec_cls in self.sections().items():
            for hidden in getattr(sec_cls, "HIDDEN", ()):
                d[name].pop(hidden)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> RunConfig:
        """Build and check a config; the error names the section and key.

        Args:
            d: section name → mapping of settings; missing sections and keys take their defaults.

        Returns:
            The checked config.
        """
        d = {} if d is None else d
        if not isinstance(d, dict):
            raise ConfigError(
                f"a config must be a mapping of sections, got {type(d).__name__}. "
                "Fix: start from `mathcircuits config --show`."
            )
        sections = cls.sections()
        unknown = [k for k in d if k not in sections]
        if unknown:
            raise ConfigError(f"unknown config sections {unknown}. Fix: use only {list(sections)}.")
        built = {}
        for name, sec_cls in sections.items():
            try:
                built[name] = from_dict(sec_cls, d.get(name), hidden=getattr(sec_cls, "HIDDEN", ()))
            except ConfigError as err:
                raise ConfigError(f"[{name}] {err}") from err
        return cls(**built)

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        """Read a ``.yaml``/``.yml``/``.toml`` file and check it.

        Args:
            path: the file.

        Returns:
            The checked config. Raises :class:`ConfigError` naming the file for any problem.
        """
        path = Path(path)
        if not path.is_file():
            raise ConfigError(
                f"config file {path} does not exist or is not a file. "
                "Fix: write one (mathcircuits config --show prints the defaults)."
            )
        if path.suffix not in (".toml", ".yaml", ".yml"):
            raise ConfigError(f"config file {path} must end in .yaml, .yml or .toml. Fix: rename it.")
        try:
            text = path.read_text()
            data = tomllib.loads(text) if path.suffix == ".toml" else load_yaml(text)
        except StrictYAMLError as err:
            raise ConfigError(f"config file {path}: {err}") from err
        except (tomllib.TOMLDecodeError, yaml.YAMLError, UnicodeDecodeError) as err:
            where = str(err).replace("\n", " ")
            raise ConfigError(
                f"config file {path} is not valid {path.suffix[1:].upper()}: {where}. "
                "Fix: correct the syntax at the place named."
            ) from err
        try:
            return cls.from_dict(data)
        except ConfigError as err:
            raise ConfigError(f"config file {path}: {err}") from err

    def check_model(self, spec: ModelSpec) -> None:
        """Refuse settings that the model cannot take (checked before a run writes anything).

        Args:
            spec: the loaded model's spec.

        Raises:
            ConfigError: a head count ``K`` (``precise@K``) above the model's heads; numbers layers or depths
                outside the model, or a numbers template that is not loaded.
        """
        self._check_numbers(spec)
        total = spec.n_layers * spec.n_heads
        for section, modes in (("finetune", self.finetune.modes), ("compare", self.compare.modes)):
            for m in modes:
                if m.top_k is not None and m.top_k > total:
                    raise ConfigError(
                        f"{section}.modes has {str(m)!r}, but {spec.describe()} has {total} heads. "
                        f"Fix: use precise@K with K <= {total}."
                    )

    def _check_numbers(self, spec: ModelSpec) -> None:
        n = self.numbers
        if not n.enabled:
            return
        bad = [l for l in n.neuron_layers or () if not 0 <= l < spec.n_layers]
        if bad:
            raise ConfigError(
                f"numbers.neuron_layers has {bad}, outside the {spec.n_layers} layers of {spec.describe()}. "
                f"Fix: use layers 0…{spec.n_layers - 1}."
            )
        deep = [d for d in n.patch_depths if d >= spec.n_layers]
        if deep:
            raise ConfigError(
                f"numbers.patch_depths has {deep}; a patch needs a block after it, and {spec.describe()} has "
                f"{spec.n_layers}. Fix: use depths 1…{spec.n_layers - 1}."
            )
        loaded = load_templates(list(self.data.template_files) if self.data.template_files else None)
        if n.template not in {t.id for s in loaded for t in s.templates}:
            raise ConfigError(
                f"numbers.template={n.template!r} is not a loaded template. Fix: name one, e.g. add_eq_1."
            )

    def save(self, path: str | Path) -> Path:
        """Write the config as YAML, atomically.

        Args:
            path: the target file.

        Returns:
            The path written.
        """
        with atomic_path(path) as tmp:
            tmp.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))
        return Path(path)


def render_config(cfg: RunConfig | None = None) -> str:
    """The config as YAML, each key annotated with its type, range or choices, default and help.

    Args:
        cfg: the config to show; None shows the defaults.

    Returns:
        YAML text that loads back to ``cfg`` (the annotations are comments).
    """
    cfg = cfg or RunConfig()
    values = cfg.to_dict()
    lines = ["# mathcircuits run configuration: every setting with its type, range and default"]
    for name, sec_cls in RunConfig.sections().items():
        lines.append(f"{name}:")
        for row in describe(sec_cls, hidden=getattr(sec_cls, "HIDDEN", ())):
            value = yaml.safe_dump({row["name"]: values[name][row["name"]]}, default_flow_style=True, width=10**6)
            value = value.strip()[1:-1]  # "{key: value}" → "key: value"
            rng = f", {row['range']}" if row["range"] else ""
            lines.append(f"  {value:<40} # {row['type']}{rng}; default {row['default']}. {row['help']}")
    return "\n".join(lines) + "\n"


def fingerprint(*parts: Any) -> str:
    """A stable hash of JSON-able parts (config sections and upstream fingerprints).

    Args:
        *parts: JSON-able values; their order matters.

    Returns:
        A 16-character hex digest (a prefix of SHA-256) that changes whenever any part changes.
    """
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
