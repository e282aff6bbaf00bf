"""Benchmark: a new user's first hour — the README's example, the next calls, notebook 04 — each a fresh process.

The goals, each a ratio measured in the same run (absolute times do not travel between machines): the README's
example in ≤ 2× its arithmetic floor of CPU time, and the first call's fast-path checks ≤ 15% of that call.
Processes, timed from outside (wall clock; user + system CPU of the process and everything it waited for, by
``resource.getrusage(RUSAGE_CHILDREN)``; peak RSS), and each statement timed inside (wall and process CPU, and
the CPU time of the fast-path checks it ran or read):

* ``readme``: the README's Python example (the ```python block that starts with ``import mathcircuits as mc``),
  read from README.md at run time so it can't drift from what the README says, run statement by statement;
  three times, all with a verdict cache that starts empty (as on a new machine): the first process runs the
  fast-path checks (their share of ``path_patch`` is the check share), the second reads their saved verdicts
  (its CPU time is the one set against the floor), the third counts the matmul FLOPs each statement does
  (``torch.utils.flop_counter``; not timed, counting slows it);
* the floor: those FLOPs over the matmul rate measured in this process at the model's shapes (the fastest of
  the attention, MLP and unembedding products, torch's default threads, per CPU second): the CPU time the
  arithmetic alone takes;
* ``next``: the same example, then the README's next block (the following ```python block: ``fresh_pairs``,
  ``knockout_curve``, ``attention_by_role``); its own statements are the figure of interest;
* ``notebook``: ``notebooks/04_teaching.ipynb`` executed headless with nbclient (kernel ``python3``), outputs
  not written back; "not measured" when nbclient is missing.

The load average before and after each process is recorded with it: on a shared machine the wall time
inflates with the load, the CPU time much less. Usage::

    python benchmarks/bench_first_hour.py                       # all of them, ~10-30 min on 2 cores
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

# Runs [(part, code), ...] statement by statement in one process and prints each statement's times, the fast-path
# checks it ran (CPU seconds, and how many were read from the saved verdicts) and, with a third argument, the
# matmul FLOPs it did (torch.utils.flop_counter; counting slows it, so that process is not timed).
DRIVER = r"""
import ast, json, sys, time
parts = json.load(open(sys.argv[1]))
count = len(sys.argv) > 2
scope = {"__name__": "__main__"}
steps = []
for part, code in parts:
    for node in ast.parse(code).body:
        flops = None
        if count:
            from torch.utils.flop_counter import FlopCounterMode
            counter = FlopCounterMode(display=False)
            counter.__enter__()
        w0, c0 = time.perf_counter(), time.process_time()
        exec(compile(ast.Module(body=[node], type_ignores=[]), "README.md", "exec"), scope)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if count:
            counter.__exit__(None, None, None)
            flops = counter.get_total_flops()
        models = sys.modules.get("mathcircuits.models")
        checks = models.checks_run(clear=True) if models is not None else []
        steps.append({"part": part, "code": ast.get_source_segment(code, node).split("#")[0].strip(),
                      "wall_s": wall, "cpu_s": cpu, "flops": flops,
                      "checks_s": sum(c.seconds for c in checks), "checks": len(checks),
                      "checks_cached": sum(c.cached for c in checks)})
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


def timed(name: str, argv: list[str], env: dict[str, str] | None = None) -> dict:
    """Run ``argv`` as a child process; its wall, CPU (children's rusage delta) and peak RSS."""
    before, r0, t0 = load(), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})})
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
                {
                    **s,
                    "wall_s": round(s["wall_s"], 2),
                    "cpu_s": round(s["cpu_s"], 2),
                    "checks_s": round(s["checks_s"], 2),
                }
                for s in json.loads(line[len("STEPS ") :])
            ]
    if proc.returncode:
        row["stderr_tail"] = proc.stderr[-3000:]
        sys.stderr.write(f"{name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}\n")
    return row


def matmul_rate(repeats: int = 5) -> dict:
    """The machine's matmul rate at the embedded model's shapes, in this process's torch threads: FLOP per CPU second.

    Rows of 256 tokens through the model's three kinds of weight (576 → 576 attention, 576 → 1536 MLP, 576 → 49152
    unembedding), float32; the best of ``repeats`` timings of each, the rate of the fastest shape (so the floor is
    the lowest this machine allows). Timed in process CPU time, the unit the example's time is compared in, so
    other jobs on a shared machine slow both alike.
    """
    import torch

    rates = {}
    shapes = {"attention": (256, 576, 576), "mlp": (256, 576, 1536), "unembed": (256, 576, 49152)}
    for name, (n, k, m) in shapes.items():
        a, b = torch.randn(n, k), torch.randn(k, m)
        a @ b  # warm up
        loops = max(1, int(2e9 // (2 * n * k * m)))
        best = float("inf")
        for _ in range(repeats):
            t0 = time.process_time()
            for _ in range(loops):
                a @ b
            best = min(best, (time.process_time() - t0) / loops)
        rates[name] = 2 * n * k * m / best
    return {"threads": torch.get_num_threads(), "flop_per_s": max(rates.values()), "by_shape": rates}


def step_sum(row: dict, key: str, part: str | None = None) -> float:
    return sum(s[key] or 0 for s in row.get("steps", []) if part is None or s["part"] == part)


def patch_step(row: dict) -> dict | None:
    return next((s for s in row.get("steps", []) if "path_patch(" in s["code"]), None)


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
    rows, floor = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        # an empty verdict cache, as on a new machine: the first process runs the checks, the later ones read them
        checks = {"MATHCIRCUITS_CHECKS_CACHE": str(Path(tmp) / "checks")}
        readme = Path(tmp) / "readme.json"
        readme.write_text(json.dumps([["readme", example]]))
        driver = [sys.executable, "-c", DRIVER, str(readme)]
        if "readme" in args.only:
            rows.append(timed("readme, first process (checks run)", driver, checks))
            rows.append(timed("readme", driver, checks))
            counted = timed("readme, FLOPs counted (not timed)", [*driver, "count"], checks)
            floor = {"flops": step_sum(counted, "flops"), **matmul_rate()}
            floor["floor_s"] = floor["flops"] / floor["flop_per_s"]
            floor["flops_by_step"] = {s["code"]: s["flops"] for s in counted.get("steps", [])}
        if "next" in args.only:
            spec = Path(tmp) / "next.json"
            spec.write_text(json.dumps([["readme", example], ["next", after]]))
            rows.append(timed("next", [sys.executable, "-c", DRIVER, str(spec)], checks))
        if "notebook" in args.only:
            nb = ROOT / args.notebook
            try:
                import nbclient  # noqa: F401  (only whether it is installed)
            except ImportError:
                rows.append({"name": "notebook", "not_measured": "nbclient missing"})
            else:
                rows.append(timed("notebook", [sys.executable, "-c", NOTEBOOK, str(nb), str(nb.parent)], checks))
                rows[-1]["notebook"] = args.notebook
    env_note["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()

    print(f"{env_note['date_utc']} UTC, {env_note['machine']}, commit {env_note['commit']}")
    print(f"before: {env_note['uptime_before']}\nafter:  {env_note['uptime_after']}")
    print("| process / statement | wall s | CPU s | checks CPU s (read/run) | load before → after (1/5/15 min) |")
    print("|---|---|---|---|---|")
    for r in rows:
        if "not_measured" in r:
            print(f"| {r['name']} | not measured: {r['not_measured']} | | | |")
            continue
        status = "" if r["returncode"] == 0 else f" (failed, exit {r['returncode']})"
        print(
            f"| **{r['name']}** (whole process){status} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | | "
            f"{r['load_before']} → {r['load_after']} |"
        )
        for s in r.get("steps", []):
            n_run = s["checks"] - s["checks_cached"]
            ran = f"{s['checks_s']:.1f} ({s['checks_cached']}/{n_run})" if s["checks"] else ""
            print(f"| &nbsp; {s['part']}: `{s['code']}` | {s['wall_s']:.1f} | {s['cpu_s']:.1f} | {ran} | |")

    summary = {}
    by_name = {r["name"]: r for r in rows}
    warm = by_name.get("readme")
    if warm and floor and warm.get("steps"):
        cpu = step_sum(warm, "cpu_s")
        summary["readme_cpu_s"], summary["floor_s"] = cpu, floor["floor_s"]
        summary["times_floor"] = cpu / floor["floor_s"] if floor["floor_s"] else float("inf")
        print(
            f"\nthe README example: {cpu:.1f} s CPU (its statements, checks read from disk) against its arithmetic "
            f"floor {floor['floor_s']:.1f} s = {floor['flops'] / 1e9:.0f} GFLOP counted / "
            f"{floor['flop_per_s'] / 1e9:.1f} GFLOP/s measured here ({floor['threads']} threads): "
            f"{summary['times_floor']:.2f}× the floor (goal ≤ 2×)"
        )
    for name in ("readme, first process (checks run)", "readme"):
        step = patch_step(by_name.get(name, {}))
        if step and step["cpu_s"]:
            share = step["checks_s"] / step["cpu_s"]
            summary["check_share" if "first" in name else "check_share_read"] = share
            print(
                f"{name}: path_patch {step['cpu_s']:.1f} s CPU, its checks {step['checks_s']:.1f} s "
                f"({step['checks_cached']} read, {step['checks'] - step['checks_cached']} run) = {share:.0%} "
                "of the call (goal ≤ 15%)"
            )

    date = env_note["date_utc"][:10]
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"first_hour_{date}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**env_note, "floor": floor, "summary": summary, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
