"""The run configuration: one value that describes a whole run, loadable from YAML or TOML.

Every field has a visible default (``mathcircuits config --show`` prints them
all). Sections map to pipeline stages; a stage re-runs only when its section
(or an upstream stage) changes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RunConfig", "ModelSection", "DataSection", "PatchingSection", "SelectionSection", "ValidationSection", "AnalysisSection", "FinetuneSection", "EvaluationSection", "ConfigError", "fingerprint"]


class ConfigError(ValueError):
    """A configuration file or value is invalid; the message names the key and the fix."""


@dataclass(frozen=True)
class ModelSection:
    source: str = "embedded"  # "embedded" | "tiny-llama" | "tiny-gpt2" | HF folder | .gguf file | Hub id
    device: str = "cpu"
    dtype: str = "float32"
    threads: int = 0  # torch threads; 0 = leave torch's default


@dataclass(frozen=True)
class DataSection:
    template_files: tuple[str, ...] = ()  # empty: every file in data_templates/
    operations: tuple[str, ...] = ("add", "sub", "mul", "div")
    template_ids: tuple[str, ...] = ()  # empty: all templates of the operations
    n_per_template: int = 8
    operand_range: tuple[int, int] = (1, 9)
    fewshot: bool = True
    multi_token_answers: str = "first"
    keep_only_correct: bool = True  # the paper's filter; false only for random test models
    seed: int = 0


@dataclass(frozen=True)
class PatchingSection:
    method: str = "exact"  # exact | reference | attribution
    metric: str = "relative_logit"  # relative_logit | logit_diff | prob_change
    senders: tuple[str, ...] = ("heads", "mlps")
    max_pairs: int = 64  # per operation (correct pairs only)
    min_pairs: int = 30  # an operation with fewer correct pairs is reported but not patched alone
    batch_size: int = 16


@dataclass(frozen=True)
class SelectionSection:
    rule: str = "zscore"  # zscore | threshold | topk
    threshold: float = -0.05
    k: int = 10
    z: float = 3.0
    max_k: int = 16
    mlp_k: int = 2


@dataclass(frozen=True)
class ValidationSection:
    knockout_max_k: int = 10
    n_random: int = 3
    scope: str = "all"  # all | last
    max_pairs: int = 32
    transfer_templates: bool = True
    transfer_multi_digit: bool = True
    word_problem_sets: tuple[str, ...] = ("SVAMP", "AddSub", "SingleEq")
    word_problem_root: str = ""  # empty: $MATHCIRCUITS_BENCHMARKS or ../shared/data/benchmarks
    word_problem_limit: int = 48


@dataclass(frozen=True)
class AnalysisSection:
    max_pairs: int = 32
    probe_prompt: str = ""  # empty: the first correct addition prompt
    circuitsvis_prompts: int = 2
    static_formats: tuple[str, ...] = ("png",)  # any of png, svg, pdf; empty: HTML only


@dataclass(frozen=True)
class FinetuneSection:
    enabled: bool = True
    modes: tuple[str, ...] = ("precise", "full")  # precise: key heads' slices (+ key MLPs); full: every parameter; precise@K[+mlp]: top-K heads
    max_steps: int = 40  # optimizer steps (CPU budget); <= 0: train for `epochs`
    train_pairs_per_template: int = 16
    operand_range: tuple[int, int] = (1, 20)
    lr: float = 2e-5  # the paper's value
    batch_size: int = 8  # effective batch (micro_batch_size × accumulation)
    micro_batch_size: int = 8
    epochs: float = 2.0
    warmup_ratio: float = 0.02
    weight_decay: float = 0.1
    kv_policy: str = "group"  # group | exclusive | frozen (shared K/V under GQA)
    include_mlps: bool = True
    save_steps: int = 20  # checkpoints, so an interrupted run resumes
    seed: int = 0


@dataclass(frozen=True)
class EvaluationSection:
    enabled: bool = True
    heldout_pairs_per_template: int = 8  # arithmetic pairs never seen in training
    benchmarks: tuple[str, ...] = ("AddSub", "SingleEq", "ARC-Easy")
    limit: int = 20  # items per benchmark
    n_shot: int = 2
    max_new_tokens: int = 96
    root: str = ""  # empty: $MATHCIRCUITS_BENCHMARKS or ../shared/data/benchmarks


@dataclass(frozen=True)
class RunConfig:
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    patching: PatchingSection = field(default_factory=PatchingSection)
    selection: SelectionSection = field(default_factory=SelectionSection)
    validation: ValidationSection = field(default_factory=ValidationSection)
    analysis: AnalysisSection = field(default_factory=AnalysisSection)
    finetune: FinetuneSection = field(default_factory=FinetuneSection)
    evaluation: EvaluationSection = field(default_factory=EvaluationSection)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        sections = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(d) - set(sections)
        if unknown:
            raise ConfigError(f"unknown config sections {sorted(unknown)}. Fix: use only {sorted(sections)}.")
        kwargs = {}
        for name, f in sections.items():
            sec_cls = f.default_factory()  # type: ignore[misc]
            values = d.get(name) or {}
            known = {g.name: g for g in dataclasses.fields(sec_cls)}
            bad = set(values) - set(known)
            if bad:
                raise ConfigError(f"unknown keys {sorted(bad)} in section [{name}]. Fix: use only {sorted(known)}.")
            conv = {}
            for k, v in values.items():
                default = getattr(sec_cls, k)
                if isinstance(default, tuple) and v is not None:
                    v = tuple(v)
                elif isinstance(default, bool) and not isinstance(v, bool):
                    raise ConfigError(f"[{name}].{k} must be true or false, got {v!r}.")
                elif isinstance(default, (int, float)) and not isinstance(default, bool) and not isinstance(v, (int, float)):
                    raise ConfigError(f"[{name}].{k} must be a number, got {v!r}.")
                conv[k] = v
            kwargs[name] = type(sec_cls)(**{**dataclasses.asdict(sec_cls), **conv})
        return cls(**kwargs)

    @classmethod
    def load(cls, path: str | Path) -> "RunConfig":
        path = Path(path)
        if not path.exists():
            raise ConfigError(f"config file {path} does not exist. Fix: write one (mathcircuits config --show prints the defaults).")
        text = path.read_text()
        if path.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            raise ConfigError(f"config file {path} must end in .yaml, .yml or .toml.")
        return cls.from_dict(data)

    def save(self, path: str | Path) -> Path:
        import yaml

        from mathcircuits._io import atomic_path

        def plain(x: Any) -> Any:
            if isinstance(x, dict):
                return {k: plain(v) for k, v in x.items()}
            if isinstance(x, (list, tuple)):
                return [plain(v) for v in x]
            return x

        with atomic_path(path) as tmp:
            tmp.write_text(yaml.safe_dump(plain(self.to_dict()), sort_keys=False))
        return Path(path)


def fingerprint(*parts: Any) -> str:
    """A stable hash of JSON-able parts (config sections and upstream fingerprints)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
