"""The device check's table: one :class:`Row` per stage, run, timed and metered by :class:`Check`, written as JSON."""

from __future__ import annotations

import gc
import json
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

COLUMNS = ("stage", "shape", "dtype", "status", "seconds", "peak_gb", "peak_total_gb", "agree_fp32", "agree_ref",
           "per_pair_s", "floor_per_pair_s", "note", "error", "extra")  # fmt: skip


@dataclass
class Row:
    """One line of the table (``COLUMNS``)."""

    stage: str
    shape: str
    dtype: str
    status: str = "ok"
    seconds: float | None = None
    peak_gb: float | None = None
    peak_total_gb: float | None = None
    agree_fp32: float | None = None
    agree_ref: float | None = None
    per_pair_s: float | None = None
    floor_per_pair_s: float | None = None
    note: str = ""
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def rel_diff(a: torch.Tensor, ref: torch.Tensor) -> float:
    """``max|a - ref| / max|ref|`` over the entries finite in both (nan when there are none or ref is 0)."""
    a, ref = a.detach().float().cpu(), ref.detach().float().cpu()
    ok = torch.isfinite(a) & torch.isfinite(ref)
    if not ok.any():
        return float("nan")
    scale = float(ref[ok].abs().max())
    return float((a[ok] - ref[ok]).abs().max()) / scale if scale > 0 else float("nan")


class Check:
    """Runs the rows: times each, meters its memory, records its error, skips what the budget cannot hold."""

    def __init__(self, device: str, budget_s: float, out: Path, meta: dict[str, Any], dry: bool = False) -> None:
        self.device, self.budget_s, self.out, self.meta, self.dry = device, budget_s, out, meta, dry
        self.rows: list[Row] = []
        self.t0 = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def row(
        self,
        stage: str,
        shape: str,
        dtype: str,
        fn: Callable[[Row], Any],
        est_s: float = 0.0,
        needs: tuple = (),
        optional: bool = False,
    ) -> Any:
        """Run ``fn(row)`` as one row; return its value, or None if it failed or was skipped.

        ``needs``: ``(name, value)`` pairs, skipped if a value is None; ``optional``: a row that runs code an earlier
        row ran already (a float32 twin), skipped in the dry run to keep it short.
        """
        from mathcircuits.pipeline import MemoryMeter

        row = Row(stage, shape, dtype)
        missing = [name for name, value in needs if value is None]
        if missing:
            row.status, row.note = "skipped", f"needs {', '.join(missing)} (failed or skipped above)"
        elif optional and self.dry:
            row.status, row.note = "skipped", "dry run: the same code as a row above"
        elif self.elapsed() + est_s > self.budget_s:
            row.status = "skipped"
            row.note = f"time budget: {self.elapsed():.0f} s spent + ~{est_s:.0f} s > {self.budget_s:.0f} s"
        if row.status == "skipped":
            self._record(row)
            return None
        value = None
        from mathcircuits.models import checks_run

        before = len(checks_run())
        cuda = [torch.device("cuda", torch.cuda.current_device())] if self.device == "cuda" else []
        start = time.perf_counter()
        try:
            with MemoryMeter(cuda) as meter:
                self._sync()
                start = time.perf_counter()
                value = fn(row)
                self._sync()
            row.seconds = time.perf_counter() - start
            row.peak_gb = meter.peak.bytes / 1e9 if meter.peak is not None else None
            if self.device == "cuda":
                row.peak_total_gb = torch.cuda.max_memory_allocated() / 1e9
        except Exception as err:  # noqa: BLE001 - a failing stage is a result of the check, not its end
            row.seconds = time.perf_counter() - start
            row.status = "failed"
            message = " ".join(str(err).split())
            row.error = f"{type(err).__name__}: {message[:600]}"
            row.extra["traceback"] = traceback.format_exc().strip().splitlines()[-12:]
            value = None
            gc.collect()
            if self.device == "cuda":
                torch.cuda.empty_cache()
        # the run-time checks this row ran first (difference against the dtype- and depth-aware tolerance)
        row.extra["checks"] = [c.to_dict() for c in checks_run()[before:]]
        self._record(row)
        return value

    def compare(self, stage: str, shape: str, dtype: str, fn: Callable[[Row], None], *values: Any) -> None:
        """Fill in a recorded row's agreement (``fn(row)``) when every value exists; an error there is noted."""
        if any(v is None for v in values):
            return
        row = next(r for r in reversed(self.rows) if (r.stage, r.shape, r.dtype) == (stage, shape, dtype))
        try:
            fn(row)
        except Exception as err:  # noqa: BLE001 - the stage ran; only its comparison failed
            row.status = "failed"
            row.error = f"comparison: {type(err).__name__}: {' '.join(str(err).split())[:400]}"
            row.extra["traceback"] = traceback.format_exc().strip().splitlines()[-8:]
        self.write()

    def _record(self, row: Row) -> None:
        self.rows.append(row)
        print(f"[{self.elapsed():5.0f} s] {row.stage} | {row.shape} | {row.dtype}: {row.status} "
              f"{_fmt(row.seconds, '.1f')} s {row.error or ''}", flush=True)  # fmt: skip
        self.write()

    def write(self) -> None:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            **self.meta,
            "elapsed_s": self.elapsed(),
            "columns": list(COLUMNS),
            "rows": [asdict(r) for r in self.rows],
            "failed": sum(r.status == "failed" for r in self.rows),
        }
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1, default=_jsonable, allow_nan=True) + "\n")
        tmp.replace(self.out)


def _jsonable(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.tolist()
    return str(x)


def _fmt(x: float | None, spec: str) -> str:
    width = int(spec.split(".")[0] or 0)
    return "-".rjust(width) if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


HEADER = (f"{'stage':<22} {'shape':<10} {'dtype':<8} {'status':<7} {'s':>7} {'peak GB':>8} {'total GB':>8} "
          f"{'vs fp32':>8} {'vs ref':>8} {'s/pair':>8} {'floor':>8}  note")  # fmt: skip


def format_row(r: Row) -> str:
    note = r.note if r.status != "failed" else f"{r.error} {r.note}".strip()
    return (
        f"{r.stage:<22} {r.shape:<10} {r.dtype:<8} {r.status:<7} {_fmt(r.seconds, '7.1f')} "
        f"{_fmt(r.peak_gb, '8.2f')} {_fmt(r.peak_total_gb, '8.2f')} {_fmt(r.agree_fp32, '8.1e')} "
        f"{_fmt(r.agree_ref, '8.1e')} {_fmt(r.per_pair_s, '8.4f')} {_fmt(r.floor_per_pair_s, '8.4f')}  {note}"
    )
