"""Score a run's circuits again with other faithfulness settings (a sensitivity analysis), on the same pairs.

The circuit stage's evaluation pairs and counterfactual pool are rebuilt from the run's config (the stage draws
them deterministically; the circuit file's ``eval_pair_ids`` must match), and :func:`mathcircuits.circuit.faithfulness`
runs with the stage's settings except those given here. Results go beside the stage's as
``circuit/faithfulness_<op>.<label>.json``.

    python scripts/circuit_rescore.py runs/circuit --mlps keep --label mlps-keep
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import torch

from mathcircuits.circuit import Circuit, faithfulness
from mathcircuits.data import filter_correct, score_pairs
from mathcircuits.pipeline import RunConfig
from mathcircuits.pipeline.context import Context
from mathcircuits.pipeline.studies.circuit.stage import circuit_pairs, split_pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--label", required=True, help="the results' file label, e.g. mlps-keep")
    ap.add_argument("--mlps", choices=["ablate", "keep"])
    ap.add_argument("--n-random", type=int)
    ap.add_argument("--points", type=int)
    ap.add_argument("--operations", nargs="*")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = RunConfig.load(args.run / "config.yaml")
    ctx = Context(args.run, cfg, progress=False)
    c = cfg.circuit
    changes = (("mlps", args.mlps), ("n_random", args.n_random), ("points", args.points))
    rescored = dataclasses.replace(c, **{k: v for k, v in changes if v is not None})
    for op in args.operations or cfg.data.operations:
        path = ctx.paths.circuit(op)
        out = path.with_name(f"faithfulness_{op}.{args.label}.json")
        if not path.exists() or out.exists():
            continue
        circuit = Circuit.load(path)
        correct = filter_correct(score_pairs(ctx.model, circuit_pairs(ctx, op, c.n_per_template, cfg.data.seed)))
        _, eval_rows = split_pairs(correct, c.discovery_pairs, c.eval_pairs, cfg.data.seed)
        ev = correct.select(eval_rows)
        if list(ev.pair_ids) != circuit.data.eval_pair_ids:
            raise SystemExit(
                f"{op}: the rebuilt evaluation pairs differ from the stage's. Fix: use the same code/config."
            )
        pool = circuit_pairs(ctx, op, c.pool_per_template, cfg.data.seed + 1, own_facts=False)
        faith = faithfulness(
            ctx.model, ev, circuit, pool=pool, config=rescored, uncertainty=c.uncertainty(cfg.data.seed)
        )
        faith.save(out)
        print(f"{op} ({args.label}): {faith.summary()}", flush=True)


if __name__ == "__main__":
    main()
