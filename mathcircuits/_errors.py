"""Errors a user can fix: the problem and the fix as two fields, so no code reads them back out of a message.

Every check of the toolkit that refuses an input raises a :class:`FixableError`, written
``FixableValueError(problem, fix)``; its message is the house form ``<problem> Fix: <fix>``. The
built-in base stays (``FixableValueError`` is a ``ValueError``, ``FixableKeyError`` a ``KeyError`` ...),
so ``except ValueError`` keeps working. The pipeline words a ``FixableError`` (and an ``OSError``) as the
user's error and anything else as internal; code that wraps one in its own error takes ``.problem`` and
gives its own fix.
"""

from __future__ import annotations

import errno

__all__ = [
    "FixableError",
]


class FixableError(Exception):
    """An error with a fix for the user.

    ``problem`` is a sentence (final period optional); ``fix`` is ``None`` when the problem's text already says it.
    """

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self._problem, self._fix = problem, fix
        super().__init__(problem if fix is None else f"{problem.rstrip()} Fix: {fix}")

    @property
    def problem(self) -> str:
        """The problem without its final period, to be quoted inside another sentence."""
        return " ".join(self._problem.split()).rstrip(". ")

    @property
    def fix(self) -> str | None:
        """What to do, without its final period (``None`` when the problem's text says it)."""
        return None if self._fix is None else " ".join(self._fix.split()).rstrip(". ")

    def __reduce__(self):  # pickled (e.g. from a worker process) with both fields, not as one message
        return (_rebuild, (type(self), self._problem, self._fix))


class FixableValueError(FixableError, ValueError):
    """A value the toolkit cannot use."""


class FixableTypeError(FixableError, TypeError):
    """A value of a type the toolkit does not take."""


class FixableKeyError(FixableError, KeyError):
    """A name the toolkit does not know."""


class FixableIndexError(FixableError, IndexError):
    """An index out of range."""


class FixableRuntimeError(FixableError, RuntimeError):
    """A run that cannot go on with the given inputs or setting."""


class FixableFileNotFoundError(FixableError, FileNotFoundError):
    """A file or folder that is not there."""


class _FixablePathError(FixableError):
    """A file or folder in the way: an ``OSError`` with ``errno`` and ``filename`` (the path in the way), whose text
    is the problem and its fix."""

    ERRNO = 0

    def __init__(self, problem: str, fix: str | None = None, path: str | None = None) -> None:
        super().__init__(problem, fix)
        self.errno, self.filename = self.ERRNO, path  # type: ignore[attr-defined]  # OSError's fields

    __str__ = BaseException.__str__  # not OSError's "[Errno n] strerror: filename"


class FixableIsADirectoryError(_FixablePathError, IsADirectoryError):
    """A folder where a file belongs."""

    ERRNO = errno.EISDIR


class FixableNotADirectoryError(_FixablePathError, NotADirectoryError):
    """A file where a folder belongs."""

    ERRNO = errno.ENOTDIR


def problem_of(err: BaseException) -> str:
    """The problem an error states, to be quoted inside another error that gives its own fix: a
    :class:`FixableError`'s ``problem``, else the message on one line without its final period."""
    if isinstance(err, FixableError):
        return err.problem
    return " ".join(str(err).split()).rstrip(". ") or type(err).__name__


def _rebuild(cls: type[FixableError], problem: str, fix: str | None) -> FixableError:
    """Unpickle with the saved fields as they are (a subclass's own ``__init__`` may reword its arguments)."""
    err = cls.__new__(cls)
    FixableError.__init__(err, problem, fix)
    return err
