"""Benchmark: a new user's first hour — the README's example, the next calls, notebook 04 — each a fresh process.

The target: the README's example finishes in ≤ 60 s of wall time on the project's 2-core machine, when
quiet, from a fresh process with the embedded model already converted. Three processes, timed from outside
(wall clock; user + system CPU of the process and everything it waited for, by ``resource.getrusage(
RUSAGE_CHILDREN)``; peak RSS), and each statement timed inside (wall and process CPU):

* ``readme``: the README's Python example (the ```python block that starts with ``import mathcircuits as mc``),
  read from README.md at run time so it can't drift from what the README says, run statement by statement;
* ``next``: the same example, then the README's next block (the following ```python block: ``fresh_pairs``,
  ``knockout_curve``, ``attention_by_role``); its own statements are the figure of interest;
* ``notebook``: ``notebooks/04_teaching.ipynb`` executed headless with nbclient (kernel ``python3``), outputs
  not written back; "not measured" when nbclient is missing.

The load average before and after each process is recorded with it: on a shared machine the wall time
inflates with the load, the CPU time much less. Usage::

    python benchmarks/bench_first_hour.py                       # all three, ~5-15 min on 2 cores
    python benchmarks/bench_first_hour.py --only readme --out /tmp/fh.json

Writes JSON to ``benchmarks/results/first_hour_<UTC date>.json`` unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs [(part, code), ...] statement by statement in one process and prints each statement's times.
DRIVER = r"""
import ast, json, sys, time
parts = json.load(open(sys.argv[1]))
scope = {"__name__": "__main__"}
steps = []
for part, code in parts:
    for node in ast.parse(code).body:
        w0, c0 = time.perf_counter(), time.process_time()
        exec(compile(ast.Module(body=[node], type_ignores=[]), "README.md", "exec"), scope)
        steps.append({"part": part, "code": ast.get_source_segment(code, node).split("#")[0].strip(),
                      "wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0})
print("STEPS " + json.dumps(steps), flush=True)
"""

NOTEBOOK = r"""
import sys, nbformat
from nbclient import NotebookClient
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}}).execute()
print("CELLS", sum(c.cell_type == "code" for c in nb.cells), flush=True)
"""


def readme_blocks(readme: Path) -> tuple[str, str]:
    """The README's example (the block starting with the import) and the ```python block right after it."""
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)
    starts = [i for i, b in enumerate(blocks) if b.startswith("import mathcircuits as mc\n")]
    if len(starts) != 1 or starts[0] + 1 >= len(blocks):
        raise SystemExit(
            f"{readme}: expected one ```python block starting with `import mathcircuits as mc` and a block after it "
            f"(the next calls); found {len(starts)} example(s) in {len(blocks)} block(s). Fix: restore the README's "
            "example and its next block."
        )
    return blocks[starts[0]], blocks[starts[0] + 1]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(name: str, argv: list[str]) -> dict:
    """Run ``argv`` as a child process; its wall, CPU (children's rusage delta) and peak RSS."""
    before, r0, t0 = load(), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    row = {
        "name": name,
        "wall_s": round(wall, 2),
        "user_s": round(r1.ru_utime - r0.ru_utime, 2),
        "sys_s": round(r1.ru_stime - r0.ru_stime, 2),
        "max_rss_mb": round(r1.ru_maxrss / 1024),  # the largest child so far (Linux: KiB)
        "load_before": before,
        "load_after": load(),
        "returncode": proc.returncode,
    }
    row["cpu_s"] = round(row["user_s"] + row["sys_s"], 2)
    for line in proc.stdout.splitlines():
        if line.startswith("STEPS "):
            row["steps"] = [
                {**s, "wall_s": round(s["wall_s"], 2), "cpu_s": round(s["cpu_s"], 2)}
                for s in json.loads(line[len("STEPS ") :])
            ]
    if proc.returncode:
        row["stderr_tail"] = proc.stderr[-3000:]
        sys.stderr.write(f"{name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}\n")
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", nargs="+", choices=("readme", "next", "notebook"), default=("readme", "next", "notebook"))
    p.add_argument("--notebook", default="notebooks/04_teaching.ipynb")
    p.add_argument("--out", default=None, help="JSON path (default benchmarks/results/first_hour_<date>.json)")
    args = p.parse_args()

    example, after = readme_blocks(ROOT / "README.md")
    env_note = {
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "python": sys.executable,
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "readme_example": example,
        "readme_next": after,
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, parts in (("readme", [["readme", example]]), ("next", [["readme", example], ["next", after]])):
            if name in args.only:
                spec = Path(tmp) / f"{name}.json"
                spec.write_text(json.dumps(parts))
                rows.append(timed(name, [sys.executable, "-c", DRIVER, str(spec)]))
    if "notebook" in args.only:
        nb = ROOT / args.notebook
        try:
            import nbclient  # noqa: F401  (only whether it is installed)
        except ImportError:
            rows.append({"name": "notebook", "not_measured": "nbclient missing"})
        else:
            rows.append(timed("notebook", [sys.executable, "-c", NOTEBOOK, str(nb), str(nb.parent)]))
            rows[-1]["notebook"] = args.notebook
    env_note["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()

    print(f"{env_note['date_utc']} UTC, {env_note['machine']}, commit {env_note['commit']}")
    print(f"before: {env_note['uptime_before']}\nafter:  {env_note['uptime_after']}")
    print("| process / statement | wall s | CPU s | load before → after (1/5/15 min) |")
    print("|---|---|---|---|")
    for r in rows:
        if "not_measured" in r:
            print(f"| {r['name']} | not measured: {r['not_measured']} | | |")
            continue
        status = "" if r["returncode"] == 0 else f" (failed, exit {r['returncode']})"
        print(
            f"| **{r['name']}** (whole process){status} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
            f"{r['load_before']} → {r['load_after']} |"
        )
        for s in r.get("steps", []):
            print(f"| &nbsp; {s['part']}: `{s['code']}` | {s['wall_s']:.1f} | {s['cpu_s']:.1f} | |")

    date = env_note["date_utc"][:10]
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"first_hour_{date}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**env_note, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
