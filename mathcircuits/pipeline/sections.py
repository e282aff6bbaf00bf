"""The run config's own sections: the library's configs plus what the stages need (model loading, where templates
come from and how facts are shared among stages, the fine-tuning modes compared), each checked when built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from mathcircuits._errors import FixableError, problem_of
from mathcircuits._schema import ConfigError, check_fields, project, setting
from mathcircuits.data import GenerationConfig, load_templates
from mathcircuits.data.facts import Fact
from mathcircuits.finetune import Mode, SFTConfig
from mathcircuits.models import resolve_source
from mathcircuits.models.embedded import canonical_source
from mathcircuits.pipeline.facts import FactStage, stage_facts

__all__ = [
    "FinetuneSection",
    "ModelSection",
]


def _check_device(device: str) -> None:
    """Refuse a device this torch cannot use (e.g. ``cuda`` on a CPU build), naming what is available."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ConfigError(f"model.device={device!r} is not a torch device. ", "use cpu, cuda or cuda:N.") from err
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
    if not available.get(dev.type, False):
        have = [d for d, ok in available.items() if ok]
        raise ConfigError(
            f"model.device={device!r}, but this torch ({torch.__version__}) has no usable {dev.type} device. ",
            f"use one of {have}.",
        )
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(
            f"model.device={device!r}, but only {torch.cuda.device_count()} CUDA devices are visible. ",
            f"use cuda:0 … cuda:{torch.cuda.device_count() - 1}.",
        )


@dataclass(frozen=True)
class ModelSection:
    """Which model to load, where and how (``load_model``'s arguments)."""

    source: str = setting(
        "embedded",
        "embedded | gemma3-270m | tiny-llama | tiny-<family> | HF folder | .gguf file | cached Hub id | hub:<id>",
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
        object.__setattr__(self, "source", canonical_source(self.source))  # one name per model (aliases resolved)
        _check_device(self.device)
        if self.device_map and self.source.startswith("tiny-"):
            raise ConfigError(
                f"model.device_map={self.device_map!r} needs a model loaded from files, but {self.source!r} is built "
                "in memory. ",
                "leave device_map empty, or save the model with save_pretrained and give its folder.",
            )
        try:
            resolve_source(self.source)  # a path that does not exist, or a name that is nothing known, fails here
        except (FileNotFoundError, KeyError) as err:
            fix = "give an existing HF folder or .gguf file, or embedded / gemma3-270m / tiny-llama / tiny-gpt2."
            if isinstance(err, KeyError) and isinstance(err, FixableError) and err.fix:
                fix = f"{err.fix}."  # an unknown name or tiny family: its own list of what there is
            raise ConfigError(f"source={self.source!r}: {problem_of(err)}. ", fix) from err


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
                f"data.stage_fact_shares={list(shares)}. ",
                "four positive shares (identify, validate, analyze, "
                "circuit) summing to at most 1, e.g. [0.35, 0.35, 0.1, 0.2].",
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
                f"{list(self.operations)}. ",
                f"choose from {sorted(known)}.",
            )
        ids = self.template_ids
        missing = [t for t in self.heldout_templates if ids is not None and t not in ids]
        if missing:
            raise ConfigError(
                f"data.heldout_templates has {missing}, which data.template_ids does not generate. ",
                "add them to data.template_ids, or remove them from data.heldout_templates.",
            )
        if ids is not None and set(ids) <= set(self.heldout_templates):
            raise ConfigError(
                "data.heldout_templates holds out every template, so none is left to find key heads on. ",
                "hold out fewer templates.",
            )

    def generation(self) -> GenerationConfig:
        """The library config alone (without the pipeline's extra fields)."""
        return project(self, GenerationConfig)

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
            raise ConfigError("finetune.modes is empty. ", "list modes, e.g. [precise, full], or set enabled: false.")
        bad = [str(m) for m in self.modes if m.kind not in ("precise", "full")]
        if bad:
            raise ConfigError(
                f"finetune modes {bad} are unknown. ",
                "use 'precise', 'precise+mlp', 'full', 'precise@K' or 'precise@K+mlp' (K heads, e.g. precise@16).",
            )

    def sft(self, mode: Mode | str, progress: bool) -> SFTConfig:
        """The library config of one mode's run (its SFT method, and this section's training settings)."""
        mode = Mode.parse(mode)
        return project(self, SFTConfig, mode=mode.method, include_mlps=mode.mlps, progress_bar=progress)
