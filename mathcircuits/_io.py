"""Atomic file writes, and the one versioned save/load protocol of every result and spec.

Every result in mathcircuits is a frozen dataclass whose fields are plain values
(str, int, float, bool, lists/tuples/dicts of them), tensors, or nested frozen
dataclasses (a :class:`~mathcircuits.models.ModelSpec`, parameter slices).
:class:`SavedResult` gives such a class ``save(path)``, ``Cls.load(path)``,
``to_dict()`` and ``Cls.from_dict(d)``, all through one code path:

* **Format by suffix.** ``*.json`` is written as indented JSON (small, human
  readable values such as key components and slices; a tensor becomes
  ``{"__tensor__": [...], "dtype": ..., "shape": [...]}``); any other suffix as
  a ``torch.save`` file, read back with ``weights_only=True``. Equal values give
  equal bytes, so re-running a stage leaves the fingerprints downstream as they
  were. Loading sniffs the content, so the suffix does not matter there. Writes
  are atomic (a temporary file beside the target, then ``os.replace``).
* **Header.** The saved dict is ``{"__kind__": "mathcircuits.<Class>",
  "__version__": N, <field>: <value>, ...}``; loading checks the kind and the
  version. Fields are encoded and decoded by their declared types, so tuples
  come back as tuples and a field of the wrong type is caught.
* **Strict fields.** An unknown or a missing field is an error that names the
  file and the field. Every load error is a :class:`ResultFileError` (a
  ``ValueError``) of the form "<file>: <problem>. Fix: <fix>.", including
  truncated, empty and garbage files.
* **Printing.** ``repr(result)`` is one short line and, in a notebook, ``_repr_html_`` a small
  table: the items of :meth:`SavedResult.summary_items` (each result says what matters: top
  heads, pairs, metric ...), never a tensor's values.
* **Older files.** Version 1 is what mathcircuits wrote before this protocol
  (unversioned ``.pt`` files with ``__kind__``/``fields``, and JSON with
  ``kind``/``version: 1``). Such a file is read when its fields still fit (a
  class can migrate them in :meth:`SavedResult.upgrade`); otherwise the error
  says it was written by an older version and which stage to re-run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import html
import io
import json
import os
import reprlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch
import yaml

from mathcircuits._codec import FieldError, decode_fields, encode_fields, from_plain, tensors_from_json, tensors_to_json

__all__ = [
    "DISK_FULL",
    "FieldError",
    "ResultFileError",
    "StrictYAMLError",
    "SavedResult",
    "atomic_dir",
    "atomic_path",
    "brief",
    "decode_fields",
    "encode_fields",
    "is_temporary",
    "load_result",
    "load_yaml",
    "read_json",
    "save_result",
    "write_json",
]

T = TypeVar("T")


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

    Args:
        rel: a path, best relative to the folder a stage writes.

    Returns:
        True when one of its parts is such a name.
    """
    return any(p.startswith(".") and p.endswith((".tmp", ".old")) for p in Path(rel).parts)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it into place only on success.

    Args:
        path: The file to write; it is replaced only when the ``with`` block succeeds.

    Returns:
        A context manager yielding the temporary file path to write.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
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
    """Yield a temporary folder beside ``path``; it replaces ``path`` only on success.

    Args:
        path: The folder to write; an existing folder there is replaced only when the ``with`` block succeeds.

    Returns:
        A context manager yielding the temporary folder to fill.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
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
    """Write ``obj`` as indented JSON, atomically.

    Args:
        path: The JSON file to write (replaced atomically).
        obj: A JSON-serialisable value.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")
    return Path(path)


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file; a missing or unparsable file is an error naming it.

    Args:
        path: the file.

    Returns:
        The parsed JSON value.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist. Fix: check the path, or run the stage that writes it.")
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ResultFileError(
            f"{path} is not valid JSON ({err}); it may be truncated or corrupted. "
            "Fix: delete it and re-run the stage that writes it."
        ) from err


class StrictYAMLError(yaml.YAMLError):
    """YAML that :func:`load_yaml` refuses although PyYAML would read it; ``problem`` and ``fix`` say why."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}. Fix: {fix}.")
        self.problem, self.fix = problem, fix


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

    Args:
        text: the YAML text.

    Returns:
        The parsed value (``None`` for an empty document). Raises :class:`StrictYAMLError` (a
        ``yaml.YAMLError``) naming the key and its lines, or the alias's line, and ``yaml.YAMLError``
        for bad syntax.
    """
    loader = _StrictLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


class ResultFileError(ValueError):
    """A saved file cannot be read as the value asked for; the message names the file, the problem and the fix."""


# ----------------------------------------------------------------------------- files


def _kind_of(cls: type) -> str:
    return f"mathcircuits.{cls.__name__}"


def _rerun(cls: type) -> str:
    stage = getattr(cls, "STAGE", "")
    where = f"re-run `mathcircuits {stage} --force` on the run folder" if stage else "re-run the code that wrote it"
    return f"{where} (or call {cls.__name__}.save() again) to write a fresh file"


def _read_payload(cls: type, path: Path) -> Any:
    name = cls.__name__
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist. Fix: check the path, or save a {name} there first.")
    if path.is_dir():
        raise ResultFileError(f"{path} is a folder, not a saved {name}. Fix: pass the file written by {name}.save().")
    raw = path.read_bytes()
    if not raw:
        raise ResultFileError(f"{path} is empty (0 bytes), e.g. left by an interrupted copy. Fix: {_rerun(cls)}.")
    if raw[:2] == b"PK":  # torch.save's zip format
        try:
            return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - any failure to unpickle means a damaged file
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0].split(". ")[0][:160]
            raise ResultFileError(
                f"{path} is not a readable .pt file; it looks truncated or corrupted ({type(err).__name__}: {reason}). "
                f"Fix: {_rerun(cls)}."
            ) from None
    try:
        payload = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ResultFileError(
            f"{path} is neither a mathcircuits .pt file nor valid JSON ({err}); it may be truncated or not a "
            f"{name} at all. Fix: pass the file written by {name}.save(), or {_rerun(cls)}."
        ) from None
    try:
        return tensors_from_json(payload)
    except (FieldError, TypeError, ValueError, RuntimeError) as err:
        raise ResultFileError(f"{path} holds a malformed tensor ({err}). Fix: {_rerun(cls)}.") from None


def _from_payload(cls: type[T], payload: Any, source: str) -> T:
    """Check the header of a saved dict and decode its fields into ``cls`` (the one load path)."""
    name = cls.__name__
    if not isinstance(payload, dict):
        raise ResultFileError(
            f"{source} holds a {type(payload).__name__}, not a saved mathcircuits value. "
            f"Fix: pass the file written by {name}.save()."
        )
    if "__kind__" in payload and "__version__" not in payload and set(payload) == {"__kind__", "fields"}:
        kind, version, fields = payload["__kind__"], 1, from_plain(payload["fields"])  # unversioned .pt (v1)
    elif "__kind__" in payload:
        kind, version = payload["__kind__"], payload.get("__version__")
        fields = {k: v for k, v in payload.items() if k not in ("__kind__", "__version__")}
    elif str(payload.get("kind", "")).startswith("mathcircuits.") and "version" in payload:  # JSON of v1
        kind, version = payload["kind"], payload["version"]
        fields = {k: v for k, v in payload.items() if k not in ("kind", "version")}
    else:
        raise ResultFileError(
            f"{source} is not a saved mathcircuits value (it has no kind/version header). "
            f"Fix: pass the file written by {name}.save()."
        )
    kind = str(kind) if str(kind).startswith("mathcircuits.") else f"mathcircuits.{kind}"
    if kind != _kind_of(cls):
        other = kind.removeprefix("mathcircuits.")
        raise ResultFileError(
            f"{source} holds a {other}, not a {name}. Fix: load it with {other}.load(), or pass a {name} file."
        )
    latest = getattr(cls, "VERSION", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ResultFileError(f"{source} has the invalid format version {version!r}. Fix: {_rerun(cls)}.")
    if version > latest:
        raise ResultFileError(
            f"{source} was written by a newer mathcircuits (format version {version}; this one reads up to "
            f"{latest}). Fix: upgrade mathcircuits, or {_rerun(cls)}."
        )
    derived = {k: fields.pop(k) for k in getattr(cls, "DERIVED", ()) if k in fields}
    try:
        if version < latest:
            fields = cls.upgrade(version, fields)  # type: ignore[attr-defined]
        value = decode_fields(cls, fields)
        for k, v in derived.items():
            if getattr(value, k) != v:
                raise FieldError(f"its {k} is {v!r}, but its fields give {getattr(value, k)!r} (edited by hand?)")
        return value
    except FieldError as err:
        older = f"was written by an older mathcircuits (format version {version}) and " if version < latest else ""
        problem = str(err).split(" Fix:")[0].rstrip(". ")  # the file's fix is to re-run, not the field's own fix
        raise ResultFileError(f"{source} {older}does not fit a {name}: {problem}. Fix: {_rerun(cls)}.") from None


def save_result(obj: Any, path: str | os.PathLike) -> Path:
    """Save a result dataclass atomically: JSON for a ``.json`` path, else a ``torch.save`` file.

    Args:
        obj: a :class:`SavedResult` dataclass instance.
        path: the target file.

    Returns:
        ``path`` as a Path.
    """
    if not (dataclasses.is_dataclass(obj) and isinstance(obj, SavedResult)):
        raise TypeError(f"save_result expects a SavedResult dataclass, got {type(obj).__name__}.")
    path = Path(path)
    payload = obj.to_dict()
    with atomic_path(path) as tmp:
        if path.suffix == ".json":
            tmp.write_text(json.dumps(tensors_to_json(payload), indent=2) + "\n")
        else:  # to a file object, not a path: torch.save names the zip's folder after a path's (random) file name
            with tmp.open("wb") as f:
                torch.save(payload, f)
    return path


def load_result(cls: type[T], path: str | os.PathLike) -> T:
    """Load a value saved by :func:`save_result` (either format), checking kind, version and fields.

    Args:
        cls: the class expected in the file.
        path: the file.

    Returns:
        The value. Raises ``FileNotFoundError`` or :class:`ResultFileError` naming the file, the problem and the fix.
    """
    path = Path(path)
    return _from_payload(cls, _read_payload(cls, path), str(path))


class SavedResult:
    """Mixin for frozen result dataclasses: one versioned save/load protocol (see the module docstring).

    Class attributes a subclass may set: ``VERSION`` (bump it when fields change, and migrate older
    files in :meth:`upgrade`), ``STAGE`` (the pipeline stage that writes it, named in error fixes) and
    ``DERIVED`` (properties also written for human readers; on load they must equal the recomputed value).
    """

    VERSION: ClassVar[int] = 2
    STAGE: ClassVar[str] = ""
    DERIVED: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        """The value as ``{"__kind__", "__version__", <fields>, <derived>}`` (plain values and CPU tensors)."""
        derived = {k: getattr(self, k) for k in type(self).DERIVED}
        return {"__kind__": _kind_of(type(self)), "__version__": type(self).VERSION, **encode_fields(self), **derived}

    @classmethod
    def from_dict(cls: type[T], d: dict[str, Any], source: str = "the given dict") -> T:  # noqa: PYI019
        """Rebuild a value from :meth:`to_dict`; checks kind, version and fields like :meth:`load`.

        Args:
            d: a dict made by :meth:`to_dict` (or read from a saved file).
            source: what ``d`` is, for error messages.

        Returns:
            The value.
        """
        if isinstance(d, dict):
            d = tensors_from_json(d)
        return _from_payload(cls, d, source)

    @classmethod
    def upgrade(cls, version: int, fields: dict[str, Any]) -> dict[str, Any]:
        """Migrate the fields of a file of an older format ``version`` (default: unchanged)."""
        return fields

    def save(self, path: str | os.PathLike) -> Path:
        """Write the value to ``path`` atomically (JSON for ``*.json``, else ``.pt``). Returns the path."""
        return save_result(self, path)

    @classmethod
    def load(cls: type[T], path: str | os.PathLike) -> T:  # noqa: PYI019 - beartype cannot check Self here
        """Read a value written by :meth:`save`; errors name the file, the problem and the fix."""
        return load_result(cls, path)

    # ------------------------------------------------------------------------- printing

    def summary_items(self) -> list[tuple[str, str]]:
        """What this value is, in a few ``(label, text)`` items (subclasses name what matters).

        The default describes each field briefly: a tensor by its shape, a collection by its length, a
        nested record by its class; a subclass overrides it to say, e.g., its top heads.

        Returns:
            ``[(label, text), ...]``, a handful of short items.
        """
        return [(f.name, brief(getattr(self, f.name))) for f in dataclasses.fields(self)][:8]  # type: ignore[arg-type]

    def __repr__(self) -> str:
        items = ", ".join(f"{k}={v}" for k, v in self.summary_items())
        return f"{type(self).__name__}({items})"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th><td style='text-align:left'>{html.escape(v)}</td>"
            "</tr>"
            for k, v in self.summary_items()
        )
        return f"<table><caption style='text-align:left'><b>{type(self).__name__}</b></caption>{rows}</table>"


def brief(value: Any, limit: int = 60) -> str:
    """A value in a few characters for a summary: tensors by shape, collections by length, records by class.

    Args:
        value: any field value.
        limit: the longest text kept (longer text is cut with "…").

    Returns:
        The text.
    """
    if isinstance(value, torch.Tensor):
        return f"tensor{list(value.shape)}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = getattr(value, "name", None)
        return str(name) if isinstance(name, str) and name else type(value).__name__
    if isinstance(value, dict):
        return f"{len(value)} entries"
    if isinstance(value, (list, tuple)):
        if len(value) <= 4 and all(isinstance(v, (int, float, str, bool)) for v in value):
            text = ", ".join(str(v) for v in value)
        else:
            return f"{len(value)} items"
    elif isinstance(value, float):
        text = f"{value:.4g}"
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
