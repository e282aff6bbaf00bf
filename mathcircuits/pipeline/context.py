"""What every stage shares: the run :class:`Context`, the typed :class:`StageSummary` base and save helpers.

Stages talk only through the run folder: each reads what upstream stages wrote
(paths from :class:`~mathcircuits.pipeline.paths.RunPaths`) and writes its own
sub-folder atomically. Datasets are loaded into memory, so the ``datasets``
library never leaves ``cache-*.arrow`` files inside a saved dataset folder.
"""

from __future__ import annotations

import dataclasses
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pandas as pd
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from mathcircuits._codec import Encoded
from mathcircuits._errors import FixableValueError
from mathcircuits._files import ResultFileError, atomic_path, read_json
from mathcircuits._io import SavedResult
from mathcircuits.data import Operation, PairSet, load_templates
from mathcircuits.models import HookedModel, load_hf_model, load_model
from mathcircuits.pipeline.config import RunConfig
from mathcircuits.pipeline.memory import PeakMemory
from mathcircuits.pipeline.paths import RunPaths
from mathcircuits.stats import Uncertainty

__all__ = [
    "StageSummary",
    "select_pairs",
]

#: one row of a results table whose columns the config chooses (benchmarks, modes): column → value.
TableRow = dict[str, str | int | float]

S = TypeVar("S", bound="StageSummary")


@dataclass(frozen=True)
class StageSummary(SavedResult):
    """What a stage did, in brief: a saved result that prints itself and round-trips through ``.done.json``.

    Every field is typed (records between stages are small frozen dataclasses, not dicts) and decoded strictly
    by the codec of every result. The marker is its header, so its dict is its fields alone; one that does not
    fit (another version wrote it) is refused, naming the stage to re-run.
    """

    HEADER: ClassVar[bool] = False

    seconds: float = dataclasses.field(default=0.0, kw_only=True)
    #: the stage's peak memory above its start (set by the runner)
    peak_memory: PeakMemory | None = dataclasses.field(default=None, kw_only=True)

    @classmethod
    def from_dict(cls: type[S], d: Encoded, source: Path | str = "summary") -> S:  # noqa: PYI019
        """Rebuild from :meth:`to_dict`; unknown, missing or mistyped fields are an error naming ``source``."""
        try:
            return super().from_dict(d, source=str(source))  # type: ignore[misc]
        except ResultFileError as err:
            raise FixableValueError(
                f"{err.problem}. ", "re-run the stage with --force (it was written by another version)."
            ) from None

    def lines(self) -> list[str]:
        """The CLI summary, one string per line (subclasses say what matters)."""
        return [f"  {k}: {v}" for k, v in self.to_dict().items() if k not in ("seconds", "peak_memory")]

    def __str__(self) -> str:
        return "\n".join(self.lines())


class Context:
    """The run folder, its config and a lazily loaded model shared by the stages of one process."""

    def __init__(self, run_dir: Path, config: RunConfig, progress: bool = True, force: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.paths = RunPaths(self.run_dir)
        self.config = config
        self.progress = progress
        self.force = force
        self._model: HookedModel | None = None

    @property
    def model(self) -> HookedModel:
        """The hooked model (TransformerBridge), loaded on first use."""
        if self._model is None:
            m = self.config.model
            if m.threads:
                torch.set_num_threads(m.threads)
            placement = {"device_map": m.device_map, "offload_folder": self.paths.offload} if m.device_map else {}
            self._model = load_model(m.source, device=m.device, dtype=getattr(torch, m.dtype), **placement)
        return self._model

    @property
    def uncertainty(self) -> Uncertainty:
        """How the run's intervals are drawn: the default bootstrap, seeded by ``data.seed``."""
        return Uncertainty(seed=self.config.data.seed)

    def hf_model(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        """A fresh plain HF model and tokenizer (fine-tuning never touches the hooked model's weights)."""
        m = self.config.model
        return load_hf_model(m.source, dtype=getattr(torch, m.dtype), device=m.device)

    def templates(self) -> list[Any]:
        """The template sets of the data section (every bundled file when none is named)."""
        files = self.config.data.template_files
        return load_templates(list(files) if files else None)

    def arithmetic_template_ids(self) -> tuple[str, ...]:
        """Ids of the templates of the data section's operations, word forms (time span, accumulation) left out."""
        ops = self.config.data.operations
        return tuple(
            t.id
            for s in self.templates()
            for t in s.templates
            if t.operation in ops and t.form not in ("time_span", "accumulation")
        )

    def load_dataset(self, path: Path) -> PairSet:
        """A saved pair set, in memory (so later selections write no cache files into the run folder)."""
        return PairSet.load(path)

    def summary(self, stage: str, cls: type[S]) -> S:
        """The typed summary a finished upstream stage left in its marker."""
        marker = self.paths.marker(stage)
        return cls.from_dict(read_json(marker)["summary"], source=marker)


def save_dataset(pairs: PairSet, path: Path) -> None:
    """Save a pair set's folder atomically (:meth:`PairSet.save <mathcircuits.data.PairSet.save>`)."""
    pairs.save(path)


def save_csv(df: pd.DataFrame, path: Path) -> None:
    """Write a table atomically (no index column)."""
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)


def select_pairs(pairs: PairSet, operation: Operation | None, limit: int, seed: int = 0, skip: int = 0) -> PairSet:
    """Up to ``limit`` rows (of one ``operation``, or any), in a seeded random order, after the first ``skip``.

    The order depends only on ``pairs``, ``operation`` and ``seed``, so two calls with the same three and
    ``skip`` of the first equal to its ``limit`` return disjoint rows: the identify stage takes the first
    ``patching.max_pairs`` of each operation, the validate stage the rows after them (fresh pairs).
    Possibly fewer than ``limit``, or none.
    """
    if skip < 0:
        raise FixableValueError(f"select_pairs got skip={skip}. ", "pass the number of rows another stage used (>= 0).")
    if operation is not None:
        pairs = pairs.of_operations((operation,))
    pairs = pairs.shuffle(seed=seed)
    return pairs.select(list(range(min(skip, len(pairs)), min(skip + limit, len(pairs)))))  # a list: may be empty


def template_spread(pairs: PairSet, seed: int = 0) -> list[int]:
    """Every row of ``pairs``, ordered round-robin over its templates (each template's rows in a seeded order).

    The first ``n`` rows of this order cover ``min(n, templates)`` templates, each within one row of the others:
    a sample that must span every template (clusters for an interval, discovery vs evaluation pairs) takes them.
    """
    rng = random.Random(seed)
    by_t: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(pairs.template_ids):
        by_t[t].append(i)
    queues = [rng.sample(rows, len(rows)) for _, rows in sorted(by_t.items())]
    order = []
    while any(queues):
        for q in queues:
            if q:
                order.append(q.pop())
    return order
