"""The run-time checks' verdicts on disk, so that a later process on the same model does not run them again.

A check (:func:`~mathcircuits.models.forward.integrity.verify_once`) proves a fast path on the user's own model
with a few probe forwards both ways; in a fresh process it is a large share of the first call. Its verdict
depends only on what computes the two paths: the model (its config, its module tree, its weights), the dtype and
device it runs in, the installed dependencies and mathcircuits' own code. A passed verdict is saved under a key
of all of these, ``<cache>/checks/<key>.json`` (the cache is ``$MATHCIRCUITS_CACHE`` or ``~/.cache/mathcircuits``),
and a later process that computes the same key reads it instead of running the check. Anything changed (a
dependency upgraded, the code edited, the weights fine-tuned, another device or dtype) is another key, so the
check runs again.

Only passes are saved. A file that does not parse, or does not state a pass of its own key and path, is ignored
with a warning (never trusted) and the check runs. ``MATHCIRCUITS_CHECKS_CACHE`` names another folder, or
``off`` to neither read nor write (the test suite sets it: its tests break fast paths on purpose). Weights that
cannot be read here (offloaded to the meta device) give no key: the check runs every process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import warnings
import weakref
from pathlib import Path
from typing import Any

import torch

from mathcircuits._files import JSONObject, write_json
from mathcircuits.models.compat import installed_versions
from mathcircuits.models.embedded import cache_root

__all__: list[str] = []

ENV = "MATHCIRCUITS_CHECKS_CACHE"
"""A folder for the saved verdicts, or ``off``; unset: ``<cache>/checks``."""

DEPENDENCIES = ("torch", "transformers", "transformer-lens", "peft", "accelerate")
"""The distributions whose versions are part of the key (with Python's and mathcircuits' own code)."""

SAMPLE = 4096  # elements read per weight tensor for its fingerprint (evenly strided, so a tuned slice shows)

_KEYS: weakref.WeakKeyDictionary[Any, JSONObject | None] = weakref.WeakKeyDictionary()


def cache_dir() -> Path | None:
    """Where verdicts are saved: ``$MATHCIRCUITS_CHECKS_CACHE`` (None when ``off``), else ``<cache>/checks``."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in ("off", "0", "false", "no"):
        return None
    return Path(value).expanduser() if value else cache_root() / "checks"


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of mathcircuits' own source files (the fast paths and their checks are among them)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def dependency_versions() -> dict[str, str]:
    """The versions that are part of the key: Python, the :data:`DEPENDENCIES`, mathcircuits' code digest."""
    return {"python": platform.python_version(), **installed_versions(DEPENDENCIES), "mathcircuits": code_digest()}


def _weights_digest(module: torch.nn.Module) -> str | None:
    """Names, shapes, dtypes and an evenly strided sample of every parameter and buffer; None when one is on meta."""
    h = hashlib.sha256()
    with torch.no_grad():
        for name, t in [*module.named_parameters(), *module.named_buffers()]:
            if t.device.type == "meta":
                return None
            flat = t.detach().reshape(-1)
            sample = flat[:: max(1, flat.numel() // SAMPLE)][:SAMPLE]
            h.update(f"{name}|{tuple(t.shape)}|{t.dtype}|".encode())
            h.update(sample.to("cpu", torch.float64 if t.is_floating_point() else torch.int64).numpy().tobytes())
    return h.hexdigest()[:16]


def identity(owner: Any) -> JSONObject | None:
    """What the verdicts of ``owner``'s checks depend on, as readable fields; None when it has no stable identity.

    Computed once per object and process (as the in-process verdicts are kept per object).
    """
    try:
        if owner in _KEYS:
            return _KEYS[owner]
    except TypeError:  # not weakly referenceable: no key
        return None
    found = _identity(owner)
    _KEYS[owner] = found
    return found


def _identity(owner: Any) -> JSONObject | None:
    if not isinstance(owner, torch.nn.Module):
        return None
    weights = _weights_digest(owner)
    if weights is None:
        return None
    first = next((p for p in owner.parameters() if p.is_floating_point()), None)
    hf = getattr(owner, "original_model", owner)
    config = getattr(hf, "config", None)
    config_text = config.to_json_string(use_diff=False) if hasattr(config, "to_json_string") else repr(config)
    tree = "\n".join(f"{n}:{type(m).__module__}.{type(m).__qualname__}" for n, m in owner.named_modules())
    return {
        "model": str(getattr(config, "_name_or_path", "") or type(hf).__name__),
        "class": f"{type(owner).__module__}.{type(owner).__qualname__}",
        "config": hashlib.sha256(config_text.encode()).hexdigest()[:16],
        "modules": hashlib.sha256(tree.encode()).hexdigest()[:16],
        "weights": weights,
        "dtype": str(first.dtype if first is not None else torch.float32),
        "device": str(first.device if first is not None else "cpu"),
        "versions": dependency_versions(),
    }


def _file(ident: JSONObject, path: str) -> tuple[Path, str] | None:
    folder = cache_dir()
    if folder is None:
        return None
    key = hashlib.sha256(json.dumps([ident, path], sort_keys=True).encode()).hexdigest()[:32]
    return folder / f"{key}.json", key


def load(owner: Any, path: str) -> JSONObject | None:
    """The saved pass of check ``path`` on ``owner`` (``difference``, ``tolerance``, ``seconds``), else None."""
    ident = identity(owner)
    where = _file(ident, path) if ident is not None else None
    if where is None or not where[0].exists():
        return None
    file, key = where
    try:
        saved = json.loads(file.read_text())
        record = saved["record"]
        difference, tolerance = float(record["difference"]), float(record["tolerance"])
        trusted = (
            saved["key"] == key and saved["path"] == path and saved["identity"] == ident and difference <= tolerance
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        trusted, why = False, f"{type(err).__name__}: {err}"
    else:
        why = "it does not state a pass of this model, path and versions"
    if not trusted:
        warnings.warn(
            f"ignoring the saved check verdict {file} ({why}); the {path} check runs again and replaces it.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return {"difference": difference, "tolerance": tolerance, "seconds": float(record.get("seconds", 0.0))}


def save(owner: Any, path: str, record: JSONObject) -> None:
    """Save a passed check (a record's ``to_dict()``); a cache folder that cannot be written is skipped silently."""
    ident = identity(owner)
    where = _file(ident, path) if ident is not None else None
    if where is None:
        return
    file, key = where
    try:
        write_json(file, {"key": key, "path": path, "identity": ident, "record": record})
    except OSError:  # a read-only cache costs a re-check next time, nothing else
        pass
