"""CPU time of EAP-IG, EAP-IG by each pair's |effect| and the guarded search from it, side by side in one process.

On SmolLM2 add and sub (the pairs and split of ``bench_mib.py --seed 2``: 8 scoring pairs), one thread, each
ranking twice: what the search costs against EAP-IG, the ratio ``bench_mib.py`` reports under whatever load runs
beside it. Results: ``benchmarks/results/mib_cpu_<UTC date>.json``.

    nice -n 5 .venv/bin/python benchmarks/bench_mib_cpu.py          # ~9 min on a quiet 2-core machine
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from mathcircuits.circuit import eap_scores
from mathcircuits.circuit.search import search_circuits
from mathcircuits.models import load_model

sys.path.insert(0, str(Path(__file__).parent))
from bench_mib import RESULTS, _cpu_timed, _pairs, _split  # noqa: E402


def measure(model, score) -> dict:
    """Each ranking twice, then the search from the second magnitude ranking: CPU seconds and the search's steps."""
    row: dict = {"eap-ig": [], "magnitude": []}
    for _ in range(2):
        row["eap-ig"].append(_cpu_timed(lambda: eap_scores(model, score, "eap-ig", progress=False))[2])
        mag, _, c = _cpu_timed(lambda: eap_scores(model, score, "eap-ig", aggregate="magnitude", progress=False))
        row["magnitude"].append(c)
    found, _, row["search"] = _cpu_timed(
        lambda: search_circuits(model, score, start=mag, objective="pairs", min_wins=1.0)
    )
    row["choices"] = list(found.choice)
    row["search_with_start_over_eap_ig"] = (row["search"] + sum(row["magnitude"]) / 2) / (sum(row["eap-ig"]) / 2)
    return row


def main(seed: int = 2) -> None:
    torch.set_num_threads(1)
    model = load_model("embedded")
    out: dict = {"seed": seed, "load_before": os.getloadavg(), "started": datetime.now(timezone.utc).isoformat()}
    for op in ("add", "sub"):
        score, _ = _split(_pairs(model, op, [f"{op}_eq_1", f"{op}_eq_2"], 24, seed), 8, 16)
        row = measure(model, score)
        out[op] = row
        print(op, row, flush=True)
    out["load_after"] = os.getloadavg()
    path = RESULTS / f"mib_cpu_{datetime.now(timezone.utc):%Y-%m-%d}.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
