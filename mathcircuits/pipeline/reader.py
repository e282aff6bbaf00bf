"""The report's reader of a run folder: each study's saved results, read once, with why a missing one is missing."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TypeVar

from mathcircuits._io import ResultFileError, SavedResult
from mathcircuits.pipeline.context import Context

__all__ = ["ResultReader"]

log = logging.getLogger(__name__)

R = TypeVar("R", bound=SavedResult)


class ResultReader:
    """The report's view of a run folder: each study's saved results, read once; a missing or outdated one is
    None, and the claims that need it are told why (``off``: the stage that did not write it; ``reasons``: any
    other cause, which takes precedence)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.off: dict[str, str] = {}
        self.reasons: dict[str, str] = {}
        self._read: dict[tuple[type, Path], SavedResult | None] = {}

    def load(self, cls: type[R], path: Path, stage: str = "", name: str = "") -> R | None:
        """The result saved at ``path`` (None when absent or written by another version: ``name``'s claim says so)."""
        if not path.exists():
            if name:
                self.off.setdefault(name, stage)
            return None
        if (cls, path) not in self._read:
            try:
                self._read[cls, path] = cls.load(path)
            except ResultFileError as err:
                log.warning("%s", err)
                self._read[cls, path] = None
        if self._read[cls, path] is None and name:
            self.reasons[name] = f"{stage}: its file is from an older version, re-run `mathcircuits {stage} --force`"
        return self._read[cls, path]  # type: ignore[return-value]
