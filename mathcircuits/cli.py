"""The ``mathcircuits`` command: run the whole pipeline or one stage over a run directory.

Examples::

    mathcircuits run --config configs/default.yaml --out runs/default
    mathcircuits identify --out runs/default      # one stage (its upstream stages must be done)
    mathcircuits status --out runs/default
    mathcircuits config --show                    # every option with its default
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["main", "build_parser"]

_STAGE_HELP = {
    "data": "build reference/counterfactual pairs, score the model, keep correct pairs, write the accuracy table",
    "identify": "path-patch every head and MLP to the logits; select key components (key_components.json)",
    "validate": "mean-ablation knockout (key vs random heads) and transfer to other data",
    "analyze": "attention of key heads by token role; MLP unembedding probes",
    "report": "figures (HTML + static) and one offline HTML report",
    "finetune": "precise SFT of the key heads (and MLPs) vs full SFT",
    "evaluate": "accuracy of base / precise / full models on held-out arithmetic and benchmarks",
}


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="YAML or TOML run configuration (default: the run folder's config.yaml, else built-in defaults)")
    p.add_argument("--out", type=Path, default=Path("runs/default"), help="run directory (default: runs/default)")
    p.add_argument("--model", help="override model.source: embedded | tiny-llama | tiny-gpt2 | HF folder | .gguf file | Hub id")
    p.add_argument("--force", action="store_true", help="re-run stages even when their inputs are unchanged")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    from mathcircuits.pipeline import STAGES

    parser = argparse.ArgumentParser(prog="mathcircuits", description="Find, explain and fine-tune the circuits LLMs use for arithmetic (Zhang et al., ICML 2024).")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="run every stage (skipping those already done with the same inputs)")
    _add_common(p)
    p.add_argument("--only", nargs="+", metavar="STAGE", help=f"run only these stages, in pipeline order: {', '.join(STAGES)}")
    for name in STAGES:
        sp = sub.add_parser(name, help=_STAGE_HELP.get(name, name))
        _add_common(sp)
    s = sub.add_parser("status", help="show which stages of a run directory are done, stale or to do")
    _add_common(s)
    c = sub.add_parser("config", help="print the configuration (all defaults, or a file merged over them)")
    c.add_argument("--config", type=Path)
    c.add_argument("--show", action="store_true", help="print it as YAML")
    return parser


def _load_config(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from mathcircuits.pipeline import RunConfig

    if args.config is not None:
        cfg = RunConfig.load(args.config)
    elif getattr(args, "out", None) is not None and (args.out / "config.yaml").exists():
        cfg = RunConfig.load(args.out / "config.yaml")
    else:
        cfg = RunConfig()
    if getattr(args, "model", None):
        cfg = replace(cfg, model=replace(cfg.model, source=args.model))
    return cfg


def _print_summary(name: str, summary: dict[str, Any]) -> None:
    if name == "data":
        print("  accuracy by operation (all templates):")
        for row in summary.get("accuracy_by_operation", []):
            print(f"    {row['operation']:<5} n={row['n']:<4} accuracy={row['accuracy']:.3f}  mean p(answer)={row['mean_p_answer']:.3f}")
        print(f"  correct pairs kept: {summary.get('n_correct')} of {summary.get('n_pairs')}")
    elif name == "identify":
        print(f"  patched operations: {summary.get('patched_operations')}  (correct pairs: {summary.get('correct_pairs')})")
        print("  top heads (layer, head, effect):", ", ".join(f"L{l}.H{h} {e:+.3f}" for l, h, e in summary.get("top_heads", [])[:10]))
        print(f"  key heads ({summary.get('rule')}): {summary.get('key_heads')}  = {100 * summary.get('key_head_fraction', 0):.1f}% of heads; key MLPs: {summary.get('key_mlps')}")
    elif name == "validate":
        for op, k in summary.get("knockout", {}).items():
            print(f"  knockout {op}: top-{k['k']} heads {k['baseline']:.2f} -> {k['ranked_final']:.2f}; random {k['random_final_mean']:.2f} ± {k['random_final_std']:.2f}")
        for row in summary.get("transfer", []):
            print(f"  transfer {row['dataset']:<45} n={row['n']:<3} clean {row['clean_accuracy']:.2f}  key-ablated {row['key_ablated_accuracy']:.2f}  random-ablated {row['random_ablated_accuracy']:.2f}")
    elif name == "evaluate" and "table" in summary:
        import pandas as pd

        print(pd.DataFrame(summary["table"]).to_string(index=False))
    else:
        short = {k: v for k, v in summary.items() if not isinstance(v, (list, dict)) or len(json.dumps(v)) < 300}
        for k, v in short.items():
            print(f"  {k}: {v}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from mathcircuits.pipeline import ConfigError, run_pipeline, stage_status

    try:
        cfg = _load_config(args)
    except (ConfigError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command == "config":
        import yaml

        print(yaml.safe_dump(json.loads(json.dumps(cfg.to_dict())), sort_keys=False), end="")
        return 0
    if args.command == "status":
        for name, state in stage_status(args.out, cfg).items():
            print(f"{name:<10} {state}")
        return 0
    if args.quiet:
        import datasets

        datasets.disable_progress_bars()
    only = args.only if args.command == "run" else [args.command]
    t0 = time.perf_counter()
    try:
        summaries = run_pipeline(cfg, args.out, only=only, force=args.force, progress=not args.quiet, echo=print)
    except (ValueError, RuntimeError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for name, summary in summaries.items():
        print(f"== {name}")
        _print_summary(name, summary)
    print(f"run directory: {args.out}  ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
