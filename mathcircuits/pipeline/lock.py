"""A run folder's lock: one process at a time may run stages in it.

The lock is a file (``RunPaths.lock``) holding the owner's pid, and an ``fcntl.flock`` on that file held for
as long as the owner runs. The kernel releases the flock when its process ends, however it ends, so whoever
gets the flock is alone: it reads the pid left in the file, refuses if that process still runs (a lock
written by an older version, which used no flock), and otherwise writes its own pid. A dead process's
lock is thus taken over by exactly one of any number of contenders; the earlier read, unlink and create
let two of them hold it at once. A second process gets :class:`RunLockedError` naming the holder's pid.
The lock file is removed when the owner leaves the ``with`` block, also on an exception or Ctrl-C.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path
from types import TracebackType

from mathcircuits._errors import FixableError

__all__ = [
    "RunLockedError",
]

log = logging.getLogger(__name__)


class RunLockedError(FixableError, RuntimeError):
    """Another live process holds the run folder's lock."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _pid_in(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 64, 0).decode().strip())
    except (UnicodeDecodeError, ValueError):
        return None


class RunLock:
    """Context manager holding ``path`` (a lock file with our pid, flocked) while stages run."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.held = False
        self._fd: int | None = None

    def _refuse(self, pid: int | None) -> RunLockedError:
        who = f"process {pid}" if pid is not None else "another process"
        fix = f"if process {pid} is not a mathcircuits run, delete {self.path}." if pid is not None else ""
        return RunLockedError(
            f"run folder {self.path.parent} is in use by {who} (lock file {self.path}). "
            f"Fix: wait for that run to finish, or use another --out folder{'; ' + fix if fix else '.'}"
        )

    def acquire(self) -> None:
        """Take the lock, or take over a dead process's lock; raise :class:`RunLockedError` if a live one holds it."""
        for _ in range(10):
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _pid_in(fd)
                os.close(fd)
                raise self._refuse(pid) from None
            try:  # the holder before us may have removed the file after we opened it: lock the file now there
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            pid = _pid_in(fd)
            if pid is not None and pid != os.getpid() and _alive(pid):  # a live holder that takes no flock
                os.close(fd)
                raise self._refuse(pid)
            if pid is not None and pid != os.getpid():
                log.warning("taking over the lock %s left by process %s, which no longer runs", self.path, pid)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            self._fd, self.held = fd, True
            return
        raise RunLockedError(
            f"could not take the lock {self.path}: other processes keep taking it. ",
            "run one mathcircuits process per run folder.",
        )

    def release(self) -> None:
        """Remove the lock file and drop the flock, if we hold them."""
        if self.held and self._fd is not None:
            with contextlib.suppress(FileNotFoundError):  # while still flocked: no one else can hold this file
                if os.stat(self.path).st_ino == os.fstat(self._fd).st_ino:
                    self.path.unlink()
            os.close(self._fd)
        self._fd, self.held = None, False

    def __enter__(self) -> RunLock:  # noqa: PYI034 (beartype refuses Self outside decorated classes)
        if not self.held:
            self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
