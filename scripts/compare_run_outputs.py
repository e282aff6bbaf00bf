"""Compare two run folders value by value: the check that a refactor left a run's outputs unchanged.

    .venv/bin/python scripts/compare_run_outputs.py RUN_BEFORE RUN_AFTER

Every file of the two folders is paired by its path. Saved values (``.pt``, ``.json``) are compared by their
decoded contents: tensors element by element (exactly, or within ``--atol``), numbers exactly or within
``--atol``, everything else by equality. CSV files are compared cell by cell. What only records the run's
circumstances is left out and listed: wall and CPU times, dates, versions, host facts, the log folder, the
HTML report and figures (they embed the same values with layout ids), and the fine-tuned model weights
and checkpoints (compared through the evaluation results they produce). Exit code 0 when every compared value is equal,
1 when some differ, 2 when a file cannot be read safely.

A ``.pt`` file (and a file of an unknown suffix) is read with ``torch.load(weights_only=True)``, as the library reads
its results (``mathcircuits._io``): tensors, numbers, text and containers only. A file that would need pickled
objects to load is refused naming it, never unpickled, since a planted pickle runs code when it is loaded.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import pickle
import re
import sys
from pathlib import Path

import torch
import yaml
from datasets import Dataset

#: Keys whose values record when, where or how fast a run went, not what it found.
VOLATILE_KEYS = {
    "seconds", "wall_s", "cpu_s", "train_cpu_s", "eval_cpu_s", "elapsed", "started", "finished", "date", "time",
    "timestamp", "created", "versions", "host", "hostname", "python", "platform", "samples_per_second",
    "train_runtime", "train_samples_per_second", "train_steps_per_second", "peak_rss_mib", "rss_mib", "pid",
    "duration_s", "wall_seconds", "cpu_seconds", "total_flos", "runtime_s", "train samples/s",
    "_fingerprint",  # the datasets cache's fingerprint of the folder
    "peak_memory",  # a stage marker's memory meter
    "outputs", "fingerprint",  # a marker's hashes of its files (bytes differ with the temporary file's name) and
    # of its inputs; the files themselves are compared by value
}  # fmt: skip
#: Files and folders that are not compared (listed in the output).
SKIPPED_PARTS = {"logs", "figures", "final", "work"}
SKIPPED_SUFFIXES = {".html", ".png", ".svg", ".log", ".safetensors", ".bin", ".pth", ".lock", ".txt", ".md"}


def _load(path: Path):
    if path.suffix == ".json":
        return json.loads(path.read_text())
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if path.suffix in (".yaml", ".yml"):
        return yaml.safe_load(path.read_text())
    if path.suffix == ".csv":  # rows as dicts by column name, so a time column is left out by its name
        with path.open(newline="") as f:
            return list(csv.DictReader(f))
    if path.suffix == ".arrow":  # a saved pair set: its rows
        return Dataset.from_file(str(path)).to_dict()
    return _load_tensors(path)


class UnsafeFileError(ValueError):
    """A file that cannot be read without unpickling objects (or cannot be read at all); the message says which."""


def _load_tensors(path: Path):
    """A ``torch.save`` file read with ``weights_only=True``; anything else is an :class:`UnsafeFileError`."""
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        found = re.search(r"GLOBAL ([\w.]+)", str(err))  # weights_only refused a global: pickled objects
        if found is None:
            raise _damaged(path, err) from None
        raise UnsafeFileError(
            f"{path} holds pickled objects (it names {found.group(1)}), which a weights-only load refuses; it is "
            "not a mathcircuits result, and loading it fully could run code. Fix: compare only run folders written "
            "by mathcircuits, and delete or move this file out of the run folder if you do not know where it came "
            "from."
        ) from None
    except Exception as err:  # noqa: BLE001 - the weights-only unpickler raises anything on a damaged file
        raise _damaged(path, err) from None


def _damaged(path: Path, err: Exception) -> UnsafeFileError:
    reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
    return UnsafeFileError(
        f"{path} is not a readable torch file ({type(err).__name__}: {reason}). Fix: re-run the stage that wrote "
        "it, or move the file out of the run folder."
    )


def _num(x: str):
    try:
        return float(x)
    except ValueError:
        return None


def diff(a, b, where: str, atol: float, out: list[str]) -> None:
    """Append to ``out`` one line per difference between ``a`` and ``b``."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k in VOLATILE_KEYS:
                continue
            if k not in a or k not in b:
                out.append(f"{where}.{k}: only in {'after' if k not in a else 'before'}")
                continue
            diff(a[k], b[k], f"{where}.{k}", atol, out)
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            out.append(f"{where}: length {len(a)} vs {len(b)}")
            return
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{where}[{i}]", atol, out)
    elif isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            out.append(f"{where}: tensor {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}")
        elif not torch.allclose(a.double(), b.double(), atol=atol, rtol=0, equal_nan=True):
            out.append(
                f"{where}: tensors differ by up to {float((a.double() - b.double()).abs().nan_to_num().max()):.3g}"
            )
    elif isinstance(a, str) and isinstance(b, str) and (_num(a) is not None and _num(b) is not None):
        diff(_num(a), _num(b), where, atol, out)  # CSV cells
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if not (a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= atol):
            out.append(f"{where}: {a!r} vs {b!r}")
    elif (
        isinstance(a, str)
        and isinstance(b, str)
        and a.replace(str(ROOTS[0]), "<run>") == b.replace(str(ROOTS[1]), "<run>")
    ):
        pass  # the same path inside each run folder
    elif a != b:
        out.append(f"{where}: {str(a)[:80]!r} vs {str(b)[:80]!r}")


ROOTS: list[Path] = [Path("/nonexistent"), Path("/nonexistent")]


def compare(before: Path, after: Path, atol: float = 0.0) -> tuple[list[str], list[str], list[str]]:
    """(compared files, skipped files, differences) of two run folders."""
    ROOTS[:] = [before.resolve(), after.resolve()]
    files = sorted({p.relative_to(before) for p in before.rglob("*") if p.is_file()}
                   | {p.relative_to(after) for p in after.rglob("*") if p.is_file()})  # fmt: skip
    compared, skipped, out = [], [], []
    for rel in files:
        parts = set(rel.parts)
        checkpoint = any(x.startswith("checkpoint-") for x in rel.parts)
        if (
            SKIPPED_PARTS & parts
            or checkpoint
            or rel.suffix in SKIPPED_SUFFIXES
            or (
                rel.name.startswith(".") and rel.name != ".done.json"  # a stage's marker holds its summary
            )
        ):
            skipped.append(str(rel))
            continue
        a, b = before / rel, after / rel
        if not a.exists() or not b.exists():
            out.append(f"{rel}: only in {'before' if a.exists() else 'after'}")
            continue
        compared.append(str(rel))
        diff(_load(a), _load(b), str(rel), atol, out)
    return compared, skipped, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--atol", type=float, default=0.0, help="absolute tolerance for numbers and tensors")
    args = ap.parse_args(argv)
    for folder in (args.before, args.after):
        if not folder.is_dir():
            print(f"error: {folder} is not a folder. Fix: pass two run folders.", file=sys.stderr)
            return 2
    try:
        compared, skipped, out = compare(args.before, args.after, args.atol)
    except UnsafeFileError as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    print(f"compared {len(compared)} files value by value; skipped {len(skipped)} (times, figures, HTML, weights)")
    for f in compared:
        print(f"  = {f}")
    print("differences:" if out else "no differences")
    for line in out:
        print(f"  {line}")
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main())
