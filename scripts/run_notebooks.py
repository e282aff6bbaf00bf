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
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import uuid
from datetime import date
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient

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


def execute(path: Path, timeout: int) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    start = time.perf_counter()
    with client.setup_kernel():
        kernel = psutil.Process(client.km.provisioner.process.pid)
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/*.ipynb")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    args = parser.parse_args()
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    failed = [p for p in paths if execute(p.resolve(), args.timeout)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
