"""Atomic file writes (a temporary file beside the target, then ``os.replace``), JSON, and strict YAML.

A process killed mid-write leaves only a temporary name (:func:`is_temporary`), never half a file; a full disk
is reported naming the file (:data:`DISK_FULL`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import reprlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ForwardRef

import yaml

from mathcircuits._errors import (
    FixableError,
    FixableFileNotFoundError,
    FixableIsADirectoryError,
    FixableNotADirectoryError,
)

__all__ = [
    "JSONObject",
    "JSONValue",
    "ResultFileError",
]


_JSON = ForwardRef("JSONValue", module=__name__)  # recursive: resolved in this module wherever it is used
#: What JSON (and YAML) holds: text, numbers, booleans, null, and lists and objects of these.
JSONValue = str | int | float | bool | None | list[_JSON] | dict[str, _JSON]
JSONObject = dict[str, JSONValue]  # a config section, a marker, a record of a JSON file


class ResultFileError(FixableError, ValueError):
    """A saved file cannot be read as the value asked for; the message names the file, the problem and the fix."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


DISK_FULL = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
"""The errors of a write that found no room: no space left, file too large (a size limit), quota exceeded."""


def _nameless_full(err: OSError) -> bool:
    """Whether a full disk raised ``err`` without naming the file (``write()`` names none)."""
    return err.errno in DISK_FULL and not err.filename


def is_temporary(rel: str | os.PathLike) -> bool:
    """Whether a path is, or lies in, a temporary file or folder of :func:`atomic_path` / :func:`atomic_dir`.

    A process killed mid-write (SIGKILL, power loss) leaves ``.<name>.<random>.tmp`` (or a replaced folder's
    ``.<name>.old``) behind; such a file is never an output.
    """
    return any(p.startswith(".") and p.endswith((".tmp", ".old")) for p in Path(rel).parts)


def make_folder(folder: Path) -> None:
    """``folder.mkdir(parents=True, exist_ok=True)``, but a file in the way is named as the cause.

    ``mkdir`` reports a file where a folder belongs as "File exists" (or "Not a directory") naming the folder
    asked for; this names the file that is in the way.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as err:
        blocker = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
        if blocker is None:
            raise
        raise FixableNotADirectoryError(
            f"{blocker}: a file is where a folder belongs (to hold {folder}). ",
            "move or delete that file",
            str(blocker),
        ) from err


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it into place only on success.

    A folder at ``path`` is an ``IsADirectoryError`` naming ``path`` (not the temporary file), raised before anything
    is written.
    """
    path = Path(path)
    make_folder(path.parent)
    if path.is_dir() and not path.is_symlink():
        raise FixableIsADirectoryError(f"{path}: a folder is where a file belongs. ", "move or delete it", str(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    tmp_path.chmod(0o666 & ~_umask())  # mkstemp makes 0600; give results the usual permissions
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except OSError as err:
        if _nameless_full(err):
            raise type(err)(err.errno, os.strerror(err.errno), str(path)) from err
        raise
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; it replaces ``path`` only on success."""
    path = Path(path)
    make_folder(path.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    tmp.chmod(0o777 & ~_umask())
    try:
        try:
            yield tmp
        except OSError as err:
            if _nameless_full(err):
                raise type(err)(err.errno, os.strerror(err.errno), str(path)) from err
            raise
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")
    return Path(path)


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file; a missing or unparsable file is an error naming it."""
    path = Path(path)
    if not path.exists():
        raise FixableFileNotFoundError(f"{path} does not exist. ", "check the path, or run the stage that writes it.")
    if path.is_dir():
        raise ResultFileError(f"{path} is a folder, where a JSON file belongs. ", "move the folder away, or re-run "
                              "the stage that writes the file.")  # fmt: skip
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ResultFileError(
            f"{path} is not valid JSON ({err}); it may be truncated or corrupted. ",
            "delete it and re-run the stage that writes it.",
        ) from err
    except RecursionError:  # lists or objects nested thousands deep: Python's parser gives up
        raise ResultFileError(
            f"{path} nests lists or objects too deeply to be read (thousands of levels); no file of this toolkit "
            "or of EAP-IG does. ",
            "pass the file that was meant; if it was written by the toolkit, re-run the stage that writes it.",
        ) from None


class StrictYAMLError(FixableError, yaml.YAMLError):
    """YAML that :func:`load_yaml` refuses although PyYAML would read it; ``problem`` and ``fix`` say why."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}.", f"{fix}.")  # the message as before: "<problem>. Fix: <fix>."


class _StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a key given twice in one mapping and any alias (``*name``).

    PyYAML keeps the last of two equal keys without a word, so a second ``model:`` section silently
    replaces the first. An alias can expand exponentially ("billion laughs": a few hundred bytes that
    expand to 10⁹ items); settings files have no need for them.
    """

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise StrictYAMLError(
                f"line {mark.line + 1} uses an alias (*{self.peek_event().anchor}); aliases are not accepted",
                "write the value out in full instead of &anchor / *alias",
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                continue
            seen[key] = line
            if first is not None:
                raise StrictYAMLError(
                    f"key {reprlib.repr(key)} is given twice (lines {first} and {line}); the second would silently "
                    "replace the first",
                    f"keep one {reprlib.repr(key)} and merge the settings of both into it",
                )
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """Parse YAML safely, refusing duplicate keys and aliases (settings and template files).

    An empty document gives None. :class:`StrictYAMLError` (a ``yaml.YAMLError``) names the key and its lines,
    or the alias's line; bad syntax raises ``yaml.YAMLError``.
    """
    loader = _StrictLoader(text)
    try:
        return loader.get_single_data()
    except yaml.constructor.ConstructorError as err:  # a tag SafeLoader has no constructor for
        mark = err.problem_mark
        line = f"line {mark.line + 1}" if mark is not None else "a value"
        tag = (err.problem or "").rsplit("tag:yaml.org,2002:", 1)[-1].strip("' ")
        raise StrictYAMLError(
            f"{line} carries the tag !!{tag}, which a settings file does not take (a tag can build objects or "
            "run code)",
            "write a plain value (text, number, true/false, a list or a mapping) without the tag",
        ) from None
    finally:
        loader.dispose()
