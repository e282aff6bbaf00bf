"""Benchmark: how soon a progress bar appears after each slow call of the README's example starts.

The goal: in a fresh process, every statement of the README's two Python blocks that runs longer than 5 s shows
a progress bar on stderr within 5 s of its start. The example runs as a new user runs it (bars on: the
``MATHCIRCUITS_PROGRESS`` variable removed from the environment), statement by statement; before each statement
the driver writes a marker line to stderr. This process reads the child's stderr as it arrives, timestamps every
chunk, and finds for each statement the first chunk after its marker that is a tqdm bar (a ``desc: NN%|`` or
``desc: N it`` line). A statement with no bar at all is reported as such.

Usage::

    python benchmarks/bench_progress.py                 # ~3-6 min on 2 cores
    python benchmarks/bench_progress.py --out /tmp/progress.json

Prints one row per statement (wall time, first-bar latency, the bar's label) and writes JSON to
``benchmarks/results/progress_<UTC date>.json`` unless ``--out`` is given. Exit 0 when every slow statement
showed a bar within the limit, 1 when one did not.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "@@STATEMENT@@"
# A tqdm line: "label:  40%|####      | 2/5 [...]" or, without a total, "label: 3it [...]".
BAR = re.compile(r"(?P<desc>[^\r\n]*?):\s+(\d+%\||\d+(\.\d+)?(it| [a-z]+) \[)")

DRIVER = r"""
import ast, json, sys, time
blocks = json.load(open(sys.argv[1]))
scope = {"__name__": "__main__"}
for code in blocks:
    for node in ast.parse(code).body:
        text = ast.get_source_segment(code, node).split("#")[0].strip()
        sys.stderr.write("@@STATEMENT@@ " + json.dumps(text) + "\n"); sys.stderr.flush()
        exec(compile(ast.Module(body=[node], type_ignores=[]), "README.md", "exec"), scope)
sys.stderr.write("@@STATEMENT@@ null\n"); sys.stderr.flush()
"""


def readme_blocks() -> list[str]:
    """The README's first two ```python blocks (the example and the next calls), as the README has them."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    if len(blocks) < 2 or "import mathcircuits as mc" not in blocks[0]:
        raise SystemExit("README.md: expected the example's two ```python blocks (the first imports mathcircuits)")
    return blocks[:2]


def run(limit_s: float) -> dict:
    """Run the example in a fresh process and time the first bar after each statement's start."""
    env = {k: v for k, v in os.environ.items() if k != "MATHCIRCUITS_PROGRESS"}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        blocks_file = Path(tmp) / "blocks.json"
        blocks_file.write_text(json.dumps(readme_blocks()), encoding="utf-8")
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(blocks_file)],
            cwd=tmp,
            env=env,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
        )
        chunks: list[tuple[float, str]] = []
        assert proc.stderr is not None
        fd = proc.stderr.fileno()
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            chunks.append((time.perf_counter() - t0, data.decode("utf-8", "replace")))
        code = proc.wait()
    rows: list[dict] = []
    current: dict | None = None
    pending = ""
    for t, text in chunks:
        pending += text
        # Split on markers (whole lines); anything else in the chunk is output of the current statement.
        while True:
            at = pending.find(MARK)
            head, rest = (pending, "") if at < 0 else (pending[:at], pending[at:])
            if current is not None and current.get("bar_s") is None:
                hit = BAR.search(head)
                if hit:
                    current["bar_s"] = round(t - current["start_s"], 2)
                    current["bar"] = hit.group("desc").strip()[-60:]
            if at < 0:
                pending = ""
                break
            end = rest.find("\n")
            if end < 0:
                pending = rest  # the marker line is not whole yet
                break
            statement = json.loads(rest[len(MARK) : end].strip())
            if current is not None:
                current["wall_s"] = round(t - current["start_s"], 2)
                rows.append(current)
            current = None if statement is None else {"code": statement, "start_s": t, "bar_s": None, "bar": None}
            pending = rest[end + 1 :]
    if code != 0:
        raise SystemExit(f"the example failed (exit {code}):\n" + "".join(c for _, c in chunks)[-3000:])
    slow = [r for r in rows if r["wall_s"] > limit_s]
    late = [r for r in slow if r["bar_s"] is None or r["bar_s"] > limit_s]
    return {"limit_s": limit_s, "statements": rows, "slow": len(slow), "late": len(late), "ok": not late}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit-s", type=float, default=5.0, help="a statement longer than this must show a bar by then")
    ap.add_argument("--out", type=Path, default=None, help="JSON file to write (default benchmarks/results/...)")
    args = ap.parse_args()
    load = os.getloadavg()
    cpu0 = os.times()
    result = run(args.limit_s)
    cpu1 = os.times()
    result.update(
        date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        load_before=load[0],
        load_after=os.getloadavg()[0],
        child_cpu_s=round((cpu1.children_user + cpu1.children_system) - (cpu0.children_user + cpu0.children_system), 1),
    )
    print(f"{'statement':58} {'wall s':>7} {'bar at s':>8}  bar")
    for r in result["statements"]:
        bar_at = "-" if r["bar_s"] is None else f"{r['bar_s']:.2f}"
        print(f"{r['code'][:58]:58} {r['wall_s']:7.2f} {bar_at:>8}  {r['bar'] or ''}")
    print(
        f"{result['slow']} statements over {args.limit_s:g} s; {result['late']} without a bar by then; "
        f"child CPU {result['child_cpu_s']} s; load {load[0]:.1f} -> {result['load_after']:.1f}"
    )
    out = args.out or ROOT / "benchmarks" / "results" / f"progress_{dt.date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
