"""The one versioned save/load protocol of every result and spec (atomic writes: :mod:`mathcircuits._files`).

Every result is a frozen dataclass of plain values, tensors, or nested frozen dataclasses;
:class:`SavedResult` gives it ``save``, ``load``, ``to_dict`` and ``from_dict``, through one code path:

* **Format by suffix.** ``*.json`` is indented JSON (a tensor becomes
  ``{"__tensor__": [...], "dtype": ..., "shape": [...]}``); any other suffix a ``torch.save`` file, read
  with ``weights_only=True``. Equal values give equal bytes, so re-running a stage leaves downstream
  fingerprints as they were. Loading sniffs the content, so the suffix does not matter there.
* **Header.** ``{"__kind__": "mathcircuits.<Class>", "__version__": N, <field>: <value>, ...}``; loading
  checks kind and version, and decodes fields by their declared types (tuples come back as tuples). A
  stage summary has no header of its own: its stage's marker (``.done.json``) is its header.
* **Strict fields.** An unknown or missing field, a truncated, empty or garbage file: a
  :class:`ResultFileError` "<file>: <problem>. Fix: <fix>.".
* **Printing.** ``repr`` is one short line, ``_repr_html_`` a small table of
  :meth:`SavedResult.summary_items`, never a tensor's values.
* **Older files.** No format is migrated before 1.0: an older format version (including version 1's
  headers: unversioned ``.pt`` with ``__kind__``/``fields``, JSON with ``kind``/``version: 1``) is refused
  naming the stage to re-run.
"""

from __future__ import annotations

import dataclasses
import html
import io
import json
import os
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch

from mathcircuits._codec import (
    Encoded,
    FieldError,
    decode_fields,
    encode_fields,
    from_plain,
    tensors_from_json,
    tensors_to_json,
)
from mathcircuits._errors import FixableFileNotFoundError, problem_of
from mathcircuits._files import ResultFileError, atomic_path

__all__ = [
    "ResultFileError",
]

T = TypeVar("T")


# ----------------------------------------------------------------------------- saved results


def _kind_of(cls: type) -> str:
    return f"mathcircuits.{cls.__name__}"


def _rerun(cls: type) -> str:
    stage = getattr(cls, "STAGE", "")
    where = f"re-run `mathcircuits {stage} --force` on the run folder" if stage else "re-run the code that wrote it"
    return f"{where} (or call {cls.__name__}.save() again) to write a fresh file"


def _read_payload(cls: type, path: Path) -> Any:
    name = cls.__name__
    if not path.exists():
        raise FixableFileNotFoundError(f"{path} does not exist. ", f"check the path, or save a {name} there first.")
    if path.is_dir():
        raise ResultFileError(f"{path} is a folder, not a saved {name}. ", f"pass the file written by {name}.save().")
    raw = path.read_bytes()
    if not raw:
        raise ResultFileError(f"{path} is empty (0 bytes), e.g. left by an interrupted copy. ", f"{_rerun(cls)}.")
    if raw[:2] == b"PK":  # torch.save's zip format
        try:
            return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - any failure to unpickle means a damaged file
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0].split(". ")[0][:160]
            raise ResultFileError(
                f"{path} is not a readable .pt file; it looks truncated or corrupted "
                f"({type(err).__name__}: {reason}). ",
                f"{_rerun(cls)}.",
            ) from None
    try:
        payload = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ResultFileError(
            f"{path} is neither a mathcircuits .pt file nor valid JSON ({err}); it may be truncated or not a "
            f"{name} at all. ",
            f"pass the file written by {name}.save(), or {_rerun(cls)}.",
        ) from None
    try:
        return tensors_from_json(payload)
    except (FieldError, TypeError, ValueError, RuntimeError) as err:
        raise ResultFileError(f"{path} holds a malformed tensor ({err}). ", f"{_rerun(cls)}.") from None


def _from_payload(cls: type[T], payload: Any, source: str) -> T:
    """Check the header of a saved dict and decode its fields into ``cls`` (the one load path)."""
    name = cls.__name__
    if not isinstance(payload, dict):
        raise ResultFileError(
            f"{source} holds a {type(payload).__name__}, not a saved mathcircuits value. ",
            f"pass the file written by {name}.save().",
        )
    if not getattr(cls, "HEADER", True):
        return _decode_checked(cls, dict(payload), source)
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
            f"{source} is not a saved mathcircuits value (it has no kind/version header). ",
            f"pass the file written by {name}.save().",
        )
    kind = str(kind) if str(kind).startswith("mathcircuits.") else f"mathcircuits.{kind}"
    if kind != _kind_of(cls):
        other = kind.removeprefix("mathcircuits.")
        raise ResultFileError(
            f"{source} holds a {other}, not a {name}. ", f"load it with {other}.load(), or pass a {name} file."
        )
    latest = getattr(cls, "VERSION", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ResultFileError(f"{source} has the invalid format version {version!r}. ", f"{_rerun(cls)}.")
    if version > latest:
        raise ResultFileError(
            f"{source} was written by a newer mathcircuits (format version {version}; this one reads up to {latest}). ",
            f"upgrade mathcircuits, or {_rerun(cls)}.",
        )
    if version < latest:
        raise ResultFileError(
            f"{source} was written by an older mathcircuits (format version {version}; this one reads version "
            f"{latest}). ",
            f"{_rerun(cls)}.",
        )
    return _decode_checked(cls, fields, source)


def _decode_checked(cls: type[T], fields: Encoded, source: str) -> T:
    """The fields (and derived values) of a saved ``cls``, decoded strictly."""
    name = cls.__name__
    derived = {k: fields.pop(k) for k in getattr(cls, "DERIVED", ()) if k in fields}
    try:
        value = decode_fields(cls, fields)
        for k, v in derived.items():
            if getattr(value, k) != v:
                raise FieldError(f"its {k} is {v!r}, but its fields give {getattr(value, k)!r} (edited by hand?)")
        return value
    except FieldError as err:
        problem = problem_of(err)  # the file's fix is to re-run, not the field's own fix
        raise ResultFileError(f"{source} does not fit a {name}: {problem}. ", f"{_rerun(cls)}.") from None


def save_result(obj: Any, path: str | os.PathLike) -> Path:
    """Save a result dataclass atomically: JSON for a ``.json`` path, else a ``torch.save`` file."""
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

    Raises ``FileNotFoundError`` or :class:`ResultFileError` naming the file, the problem and the fix.
    """
    path = Path(path)
    return _from_payload(cls, _read_payload(cls, path), str(path))


class SavedResult:
    """Mixin for frozen result dataclasses: one versioned save/load protocol (see the module docstring).

    Class attributes a subclass may set: ``VERSION`` (bump it when fields change: files of an older
    version are refused, naming the stage to re-run), ``STAGE`` (the pipeline stage that writes it, named in
    error fixes) and ``DERIVED`` (properties also written for human readers; on load they must equal the
    recomputed value).
    """

    #: Nested inside another saved value, its fields are stored in place (no header of its own).
    NESTS_AS_FIELDS: ClassVar[bool] = True
    #: False for a value whose file carries the header (a stage summary inside its stage's marker): its
    #: dict is its fields alone, still decoded strictly.
    HEADER: ClassVar[bool] = True

    VERSION: ClassVar[int] = 2
    STAGE: ClassVar[str] = ""
    DERIVED: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> Encoded:
        """The value as ``{"__kind__", "__version__", <fields>, <derived>}`` (plain values and CPU tensors; no
        header where ``HEADER`` is False)."""
        cls = type(self)
        head = {"__kind__": _kind_of(cls), "__version__": cls.VERSION} if cls.HEADER else {}
        return {**head, **encode_fields(self), **{k: getattr(self, k) for k in cls.DERIVED}}

    @classmethod
    def from_dict(cls: type[T], d: Encoded, source: str = "the given dict") -> T:  # noqa: PYI019
        """Rebuild a value from :meth:`to_dict`; checks kind, version and fields like :meth:`load`.

        ``source`` says what ``d`` is, for error messages.
        """
        if isinstance(d, dict):
            d = tensors_from_json(d)
        return _from_payload(cls, d, source)

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

        The default describes each field by :func:`brief`.
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

    Text longer than ``limit`` is cut with "…".
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
