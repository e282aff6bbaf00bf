"""A run folder's lock: one process at a time may run stages in it.

The lock is a file (``RunPaths.lock``) created exclusively and holding the
owner's pid. A second process gets :class:`RunLockedError` naming that pid. A
lock whose process no longer exists (killed, crashed) is taken over. The lock
is removed when the owner leaves the ``with`` block, also on an exception or
Ctrl-C.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import TracebackType

__all__ = ["RunLock", "RunLockedError"]

log = logging.getLogger(__name__)


class RunLockedError(RuntimeError):
    """Another live process holds the run folder's lock."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class RunLock:
    """Context manager holding ``path`` (a lock file with our pid) while stages run."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.held = False

    def _holder(self) -> int | None:
        try:
            return int(self.path.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def acquire(self) -> None:
        """Take the lock, or take over a dead process's lock; raise :class:`RunLockedError` if a live one holds it."""
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                pid = self._holder()
                if pid is not None and pid != os.getpid() and _alive(pid):
                    raise RunLockedError(
                        f"run folder {self.path.parent} is in use by process {pid} (lock file {self.path}). "
                        f"Fix: wait for that run to finish, or use another --out folder; "
                        f"if process {pid} is not a mathcircuits run, delete {self.path}."
                    ) from None
                log.warning("taking over the lock %s left by process %s, which no longer runs", self.path, pid)
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                f.write(f"{os.getpid()}\n")
            self.held = True
            return
        raise RunLockedError(
            f"could not take the lock {self.path}: other processes keep taking it. "
            "Fix: run one mathcircuits process per run folder."
        )

    def release(self) -> None:
        """Remove the lock file if we hold it."""
        if self.held and self._holder() == os.getpid():
            self.path.unlink(missing_ok=True)
        self.held = False

    def __enter__(self) -> RunLock:  # noqa: PYI034 (beartype refuses Self outside decorated classes)
        if not self.held:
            self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
