"""Stage markers: what a finished stage read and wrote, so a run folder never passes stale or damaged outputs as done.

A stage ends by writing ``<stage>/.done.json``::

    {"fingerprint": F, "summary": {...}, "checks": [...], "outputs": {relative path: sha256, ...}}

``F`` hashes the stage's name, the config sections it reads, the model section and, for every upstream
stage it reads, that stage's fingerprint *and the digest of its outputs' hashes*, so an upstream stage that
re-ran and wrote other numbers changes ``F``. ``outputs`` excludes temporary files of killed writes.

A stage is *done* when its marker's fingerprint is the one the current config gives, every output file
still has its recorded hash, and every upstream stage is done; *stale* (with the reason) when one of these
fails; *todo* without a marker. So a truncated ``key_components.json`` makes identify and everything below
it stale, and ``run`` re-runs them.

While a stage runs, ``<stage>/.running.json`` holds its fingerprint: an interrupted stage resumes from its
partial outputs (fine-tuning checkpoints) only for the same fingerprint; otherwise its folder is cleared
first, so no output of an earlier configuration survives into a new result.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Required, TypedDict

from mathcircuits._codec import Encoded
from mathcircuits._files import JSONObject, is_temporary, read_json, write_json
from mathcircuits.pipeline.paths import MARKER, RUNNING

__all__: list[str] = []

_SKIP = {MARKER, RUNNING}
_CHUNK = 1 << 22


class Marker(TypedDict, total=False):
    """A stage's marker file (``.done.json``; the running marker holds the fingerprint alone)."""

    fingerprint: Required[str]
    summary: JSONObject  # the stage summary's to_dict()
    checks: list[JSONObject]  # the run-time checks the stage ran
    outputs: dict[str, str]  # output file → its hash


@dataclass(frozen=True)
class StageState:
    """A stage's state in a run folder, and why.

    ``state`` is ``done``, ``stale`` or ``todo``; ``reason``, for ``stale``, what changed (a config section, an
    upstream stage, a damaged file).
    """

    state: Literal["done", "stale", "todo"]
    reason: str = ""

    def __str__(self) -> str:
        return f"{self.state} ({self.reason})" if self.reason else self.state


def _files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(
        p for p in folder.rglob("*") if p.is_file() and p.name not in _SKIP and not is_temporary(p.relative_to(folder))
    )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def hash_outputs(folder: Path) -> dict[str, str]:
    """The SHA-256 of every file in a stage folder (marker and temporary files aside), by path relative to it.

    Sorted by POSIX relative path.
    """
    return {p.relative_to(folder).as_posix(): _sha256(p) for p in _files(folder)}


def outputs_digest(outputs: Mapping[str, str]) -> str:
    """One hash of a stage's output hashes (it enters the fingerprints of the stages downstream).

    16 hex characters.
    """
    return hashlib.sha256(json.dumps(dict(sorted(outputs.items()))).encode()).hexdigest()[:16]


def verify_outputs(folder: Path, recorded: Mapping[str, str]) -> str:
    """Why a stage's recorded outputs no longer hold, or ``""`` when every file has its recorded hash.

    The reason names the first missing or changed file.
    """
    for rel, digest in recorded.items():
        path = folder / rel
        if not path.is_file():
            return f"{folder.name}/{rel} is missing"
        if _sha256(path) != digest:
            return f"{folder.name}/{rel} changed since the stage wrote it"
    return ""


def linked_folder(folder: Path) -> str:
    """Why a stage may not write or clear ``folder``: it is a symbolic link, so both would act outside the run.

    The problem and its fix, or ``""`` for a real folder (or none).
    """
    if not folder.is_symlink():
        return ""
    return (
        f"stage folder {folder} is a symbolic link to {os.readlink(folder)}; the stage would clear and write the "
        f"files it points to, outside the run folder. Fix: remove the link (rm {folder}) and re-run, or use "
        "another --out folder"
    )


def clear_stage_folder(folder: Path) -> None:
    """Remove everything a stage wrote before (its marker included), keeping the folder.

    A link inside is removed, never followed; a stage folder that is itself a link is refused.
    """
    if problem := linked_folder(folder):
        raise ValueError(problem + ".")
    folder.mkdir(parents=True, exist_ok=True)
    for child in folder.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def read_marker(path: Path) -> Marker | None:
    """A marker's content, or None when it is missing or unreadable (a damaged marker is no marker)."""
    if not path.is_file():
        return None
    try:
        marker = read_json(path)
    except (ValueError, OSError):
        return None
    return marker if isinstance(marker, dict) and "fingerprint" in marker else None


def states(
    names: Sequence[str],
    upstream: Callable[[str], Sequence[str]],
    folder: Callable[[str], Path],
    marker: Callable[[str], Path],
    fingerprint: Callable[[str, Mapping[str, Marker]], str],
    verify: bool = True,
) -> dict[str, StageState]:
    """Every stage's state, in pipeline order (an upstream's state decides its downstream's).

    ``fingerprint`` gives the fingerprint a stage should have, given the markers read so far; ``verify=False``
    trusts the recorded hashes.
    """
    out: dict[str, StageState] = {}
    markers: dict[str, Marker] = {}
    for name in names:
        m = read_marker(marker(name))
        if m is None:
            out[name] = StageState("todo")
            continue
        markers[name] = m
        bad_up = [u for u in upstream(name) if out.get(u, StageState("done")).state != "done"]
        if bad_up:
            out[name] = StageState("stale", f"upstream stage {bad_up[0]} is {out[bad_up[0]].state}")
        elif m["fingerprint"] != fingerprint(name, markers):
            out[name] = StageState("stale", "its config sections or an upstream result changed")
        elif verify and (why := verify_outputs(folder(name), m.get("outputs", {}))):
            out[name] = StageState("stale", why)
        else:
            out[name] = StageState("done")
    return out


def write_marker(path: Path, fingerprint: str, summary: Encoded, checks: list[JSONObject]) -> None:
    """Hash the stage folder's outputs and write the marker last (atomically).

    ``summary`` is the stage summary's ``to_dict()``; ``checks`` the run-time checks the stage ran.
    """
    outputs = hash_outputs(path.parent)
    write_json(path, {"fingerprint": fingerprint, "summary": summary, "checks": checks, "outputs": outputs})
