"""Execute notebooks in place, as they are committed: with their outputs, and each stating its measured run time.

    .venv/bin/python scripts/run_notebooks.py                       # every notebook in notebooks/
    .venv/bin/python scripts/run_notebooks.py notebooks/04_teaching.ipynb

Each notebook runs top to bottom in a fresh kernel started in notebooks/. Then:

* the line ``**Run time** ...`` of its first markdown cell is replaced by the measured wall time, the kernel's
  CPU time (its children, kaleido's browser, included), the date and the load average of the machine;
* progress-bar widgets are dropped (tqdm in a notebook; their saved text is the bar's first state, 0%), with the
  notebook's widget state;
* an output that names this machine's paths (the repository, the home folder, a temporary folder) is an error:
  print a relative path or none. So is an error output, or a warning on stderr.

Execution counts stay: 1..n in order shows a clean run from the top.

Exit code 0 when every notebook ran and was written, 1 when one was not written for a problem above, 2 for a path that
is not a notebook (checked before any runs) or a cell that failed (the notebook, the cell's index and the error's
last line, on one line; that notebook is not written).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import date
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parents[1]
WIDGET = "application/vnd.jupyter.widget-view+json"
RUN_TIME = re.compile(r"^\*\*Run time\*\*.*$", re.MULTILINE)


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {round(seconds % 60):02d} s" if seconds >= 60 else f"{seconds:.0f} s"


def run_time_line(wall: float, cpu: float, load: tuple[float, float, float]) -> str:
    quiet = "quiet" if load[0] < 1.5 else "shared, loaded"
    return (
        f"**Run time** {_minutes(wall)} wall, {_minutes(cpu)} CPU, on the project's 2-core CPU machine on "
        f"{date.today().isoformat()} ({quiet}: load average {load[0]:.1f} at the end, {load[1]:.1f} over 5 min); "
        "measured by `scripts/run_notebooks.py`."
    )


def leaks(text: str) -> list[str]:
    """The machine paths that ``text`` names."""
    paths = {str(ROOT), str(Path.home()), tempfile.gettempdir(), "/tmp/", "/work/"}
    return sorted(p for p in paths if p and p in text)


def problems(nb: nbformat.NotebookNode) -> list[str]:
    """Errors, stderr warnings and machine paths in the outputs."""
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                found.append(f"cell {i}: {out.ename}: {out.evalue}")
            if out.output_type == "stream" and out.name == "stderr" and re.search(r"\w*Warning", out.text):
                found.append(f"cell {i}: a warning on stderr: {out.text.strip()[:200]}")
            text = out.get("text", "") + "".join(
                str(v) for k, v in out.get("data", {}).items() if k.startswith("text/")
            )
            if leaks(text):
                found.append(f"cell {i}: names machine paths {leaks(text)}")
    return found


def drop_progress_bars(nb: nbformat.NotebookNode) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if WIDGET not in o.get("data", {})]
    nb.metadata.pop("widgets", None)


class CellFailed(Exception):
    """A cell of a notebook raised (or timed out, or killed its kernel); the message is one line."""

    def __init__(self, path: Path, index: int, err: Exception) -> None:
        if isinstance(err, CellExecutionError):
            lines = [ln for ln in str(err.evalue).splitlines() if ln.strip()]
            last = f"{err.ename}: {lines[-1].strip()}" if lines else err.ename
        else:
            last = (str(err).strip().splitlines() or [type(err).__name__])[-1]
        super().__init__(
            f"{_shown(path)}: cell {index} failed: {last}. Fix: open the notebook, fix that cell and run this script "
            "again (the notebook was not written)."
        )


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def check_notebook(path: Path) -> str:
    """Why ``path`` cannot be run as a notebook (one line with its fix), or ``""``."""
    if not path.exists():
        return f"{path} does not exist. Fix: check the path (notebooks are in notebooks/)."
    if path.is_dir():
        return f"{path} is a folder. Fix: pass .ipynb files (or no path: every notebook in notebooks/)."
    if path.suffix != ".ipynb":
        return f"{path} is not a notebook (no .ipynb suffix). Fix: pass .ipynb files."
    try:
        nbformat.validate(nbformat.read(path, as_version=4))
    except Exception as err:  # noqa: BLE001 - not JSON, not a notebook's JSON, unreadable: all one answer
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        return f"{path} is not a readable notebook ({type(err).__name__}: {reason}). Fix: pass a Jupyter notebook."
    return ""


def execute(path: Path, timeout: int) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    start = time.perf_counter()
    with client.setup_kernel(stderr=subprocess.DEVNULL):  # the kernel's own log lines (cells' stderr is in outputs)
        kernel = psutil.Process(client.km.provisioner.process.pid)
        for index, cell in enumerate(nb.cells):
            try:
                client.execute_cell(cell, index)
            except (CellExecutionError, CellTimeoutError, DeadKernelError) as err:
                raise CellFailed(path, index, err) from None
        times = kernel.cpu_times()
        cpu = times.user + times.system + times.children_user + times.children_system
    wall = time.perf_counter() - start
    drop_progress_bars(nb)
    first = next(c for c in nb.cells if c.cell_type == "markdown")
    line = run_time_line(wall, cpu, os.getloadavg())
    first.source = RUN_TIME.sub(line, first.source) if RUN_TIME.search(first.source) else f"{first.source}\n\n{line}"
    found = problems(nb)
    if not found:
        for cell in nb.cells:
            cell.setdefault("id", uuid.uuid4().hex[:8])  # nbformat 4.5 wants cell ids
        nbformat.write(nb, path)
    print(f"{path.name}: {line}" if not found else f"{path.name}: NOT written:\n  " + "\n  ".join(found))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/*.ipynb")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for p in paths:  # every path is checked before any notebook runs
        if problem := check_notebook(p):
            print(f"error: {problem}", file=sys.stderr)
            return 2
    failed, broken = [], False
    for p in paths:
        try:
            failed += [p] if execute(p.resolve(), args.timeout) else []
        except CellFailed as err:
            print(f"error: {err}", file=sys.stderr)
            broken = True
    return 2 if broken else 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
