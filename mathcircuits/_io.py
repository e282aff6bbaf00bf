"""Atomic file writes and save/load for result values.

Every result in mathcircuits is a frozen dataclass whose fields are plain values
(str, int, float, bool, lists/dicts/tuples of them) or tensors. ``save_result``
writes such a value to one file atomically (a temporary file in the same
folder, then ``os.replace``), so an interrupted run never leaves a half-written
result behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator, TypeVar

import torch

__all__ = [
    "atomic_path",
    "atomic_dir",
    "write_json",
    "read_json",
    "save_result",
    "load_result",
    "SavedResult",
]

T = TypeVar("T")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it into place only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    tmp_path.chmod(0o666 & ~_umask())  # mkstemp makes 0600; give results the usual permissions
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; it replaces ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    tmp.chmod(0o777 & ~_umask())
    try:
        yield tmp
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
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; check the path or run the stage that writes it.")
    return json.loads(path.read_text())


def _to_plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, tuple):
        return {"__tuple__": [_to_plain(v) for v in value]}
    if isinstance(value, list):
        return [_to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    return value


def _from_plain(value: Any) -> Any:
    if isinstance(value, dict):
        if "__tuple__" in value:
            return tuple(_from_plain(v) for v in value["__tuple__"])
        return {k: _from_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_plain(v) for v in value]
    return value


def save_result(obj: Any, path: str | os.PathLike) -> Path:
    """Save a result dataclass (tensors and plain fields) to one ``.pt`` file, atomically."""
    if not dataclasses.is_dataclass(obj):
        raise TypeError(f"save_result expects a dataclass instance, got {type(obj).__name__}.")
    payload = {
        "__kind__": type(obj).__name__,
        "fields": {f.name: _to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)},
    }
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return Path(path)


def load_result(cls: type[T], path: str | os.PathLike) -> T:
    """Load a value saved by :func:`save_result`, checking it is of kind ``cls``."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; save a {cls.__name__} there first.")
    payload = torch.load(path, map_location="cpu", weights_only=True)
    kind = payload.get("__kind__")
    if kind != cls.__name__:
        raise ValueError(f"{path} holds a {kind}, not a {cls.__name__}; load it with {kind}.load().")
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    data = {k: _from_plain(v) for k, v in payload["fields"].items() if k in fields}
    return cls(**data)


class SavedResult:
    """Mixin for frozen result dataclasses: ``save(path)`` and ``Cls.load(path)`` via :func:`save_result`."""

    def save(self, path: str | os.PathLike) -> Path:
        return save_result(self, path)

    @classmethod
    def load(cls: type[T], path: str | os.PathLike) -> T:
        return load_result(cls, path)
