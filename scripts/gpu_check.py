"""One prepared device check: every stage on random-weight 7B-shaped models, on one GPU, in about 3.5 minutes.

Nothing is downloaded and no model file travels: the models are built from a ``LlamaConfig`` directly on the
device with random weights (so no correctness filter: every pair is used), and wrapped the way the package wraps
an HF model (:func:`mathcircuits.models.from_hf`). Shapes (``SHAPES``):

* ``llama2-7b``: 32 layers, 32 heads, d_model 4096, d_mlp 11008 (vocabulary: the tokenizer's);
* ``llama3-8b``: the same with 8 KV heads (grouped-query attention) and d_mlp 14336;
* ``ft-1b``: 16 layers, 32 heads (8 KV), d_model 2048, d_mlp 8192, for the fine-tuning rows only: full SFT of 7B
  with AdamW needs about 16 bytes per parameter (~110 GB), more than one 80 GB H100 holds. The three modes
  (precise, LoRA on precise's budget, full) run on this one shape so that they compare.

Each stage runs through its public API in bf16 and, where it is compared, float32 (the float32 model holds the
same weights: the bf16 one is its copy). Rows, most important first: the bf16 exact scan, its float32 twin and
the reference method on 2 pairs, the knockout curve, circuit discovery with faithfulness, attribution, attention by
role and the MLP probes, the number analyses; then the Llama-3 shape; fine-tuning; generation; ``mathcircuits run``
on ``configs/tiny.yaml`` with ``model.device`` set to the device. Before a row starts, its estimated seconds are
checked against the budget (``--budget-s``); a row that would overrun is skipped (status ``skipped``).

Every row records stage, shape, dtype, status, seconds, peak memory (GB above the row's start; on CUDA also the
absolute peak), agreement with float32 and with the reference (a relative largest difference: ``max|a-b| /
max|b|``, or the measure named in ``note``), and for the exact scan its time per pair beside the floor computed
from the shape::

    floor per pair = r · 6 · d_model · d_mlp · positions / peak FLOP/s
    r = H · L(L+1)/2 + L(L-1)/2        (the downstream last-position MLP rows of the L·(H+1) senders)

with ``positions`` the pairs' mean answer tokens (``answer_logprob`` patches every answer position) and the peak
700 TFLOP/s in bf16, 60 TFLOP/s in float32 (H100/H200 without TF32). For Llama-2-7B at 2.5 positions: 17,392 rows ·
270.5 MFLOP · 2.5 ≈ 11.8 TFLOP, floor ≈ 0.017 s. A failing row records its error (type, message, the last lines of
its traceback) and the check goes on; the exit code is 1 if any row failed. The table is printed and written as
JSON (``--out``; default ``$OUT/gpu-check.json`` when ``$OUT`` is set, else ``./gpu-check.json``) after every row.

``--dry-run`` runs the same code on the CPU with tiny shapes (2 layers, d_model 64) and no few-shot prefix, in about
a minute; rows that repeat a function an earlier row ran (the float32 twins, the Llama-3 knockout and circuit) are
skipped there, each row names the tiny shape it ran (``2L 4H/4KV d64 mlp128``), and no floor is shown (a GPU's
peak says nothing of a CPU's time on tiny shapes). The test suite runs it (``tests/test_gpu_check.py``). On the
device: ``bash scripts/gpu-check.sh`` (see ``docs/howto/big-models-on-gpu.md``, "Check a GPU in one command").
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import torch

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # the helpers beside this script (scripts/ is no package), when it is loaded by its path
    sys.path.insert(0, HERE)
from gpu_check_models import PEAK_FLOPS, SHAPES, floor_per_pair, mlp_rows, shape_label  # noqa: E402
from gpu_check_rows import run_finetune_rows, run_generation_rows, run_shape_rows, run_tiny_pipeline  # noqa: E402
from gpu_check_table import COLUMNS, HEADER, Check, format_row  # noqa: E402

__all__ = ["COLUMNS", "PEAK_FLOPS", "SHAPES", "floor_per_pair", "main", "mlp_rows", "shape_label"]

VERSIONS = ("mathcircuits", "torch", "transformers", "transformer-lens", "peft", "accelerate", "datasets", "pyarrow",
            "tokenizers", "plotly", "circuitsvis")  # fmt: skip


def _refuse(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _check_flags(args: argparse.Namespace) -> None:
    """Refuse flags that would be replaced by a default (0 pairs) or break a row later, before any row runs."""
    for flag, value, low in (
        ("--pairs", args.pairs, 2),
        ("--ref-pairs", args.ref_pairs, 1),
        ("--max-k", args.max_k, 1),
    ):
        if value is not None and value < low:
            _refuse(f"{flag} {value} is below {low}. Fix: pass {flag} {low} or more (or leave it out for the default).")
    if args.scale_pairs < 0:
        _refuse(f"--scale-pairs {args.scale_pairs} is negative. Fix: pass 0 (no scale row) or a number of pairs.")
    if args.budget_s is not None and not (math.isfinite(args.budget_s) and args.budget_s > 0):
        _refuse(f"--budget-s {args.budget_s} is not a positive number of seconds. Fix: pass e.g. --budget-s 450.")
    if args.tokenizer is not None and not (Path(args.tokenizer) / "tokenizer_config.json").is_file():
        _refuse(
            f"--tokenizer {args.tokenizer} is not a tokenizer folder (no tokenizer_config.json). "
            "Fix: pass a folder written by save_pretrained, or leave it out for the tiny tokenizer."
        )
    if args.out is not None and (args.out.is_dir() or not args.out.parent.is_dir()):
        where = "is a folder" if args.out.is_dir() else f"lies in {args.out.parent}, which is not a folder"
        _refuse(f"--out {args.out} {where}. Fix: name a JSON file in an existing folder, e.g. out/gpu-check.json.")
    if args.device is not None:
        try:
            torch.device(args.device)
        except RuntimeError:
            _refuse(f"--device {args.device!r} is not a torch device. Fix: pass cuda, cuda:N or cpu.")
    _check_device(args.device or ("cpu" if args.dry_run else "cuda"), given=args.device is not None, dry=args.dry_run)


def available_devices() -> list[str]:
    """The devices this machine has: cpu, and cuda:0 … cuda:N-1."""
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return ["cpu", *(f"cuda:{i}" for i in range(n))]


def _check_device(name: str, given: bool, dry: bool) -> None:
    """Refuse a device this machine lacks, naming those it has, before any row runs."""
    device, have = torch.device(name), available_devices()
    cuda_ok = device.type == "cuda" and len(have) > 1 and (device.index is None or f"cuda:{device.index}" in have)
    if device.type == "cpu" or cuda_ok:
        return
    flag = f"--device {name}" if given else "the default device cuda"
    if device.type == "cuda" and len(have) == 1:
        cpu = "leave --device out (the dry run uses the CPU)" if dry else "pass --dry-run for the CPU check"
        _refuse(
            f"{flag} needs CUDA, but this machine has no CUDA device (available: cpu). Fix: run on the GPU machine, "
            f"or {cpu}."
        )
    _refuse(f"{flag} is not on this machine (available: {', '.join(have)}). Fix: pass one of those.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="the same code on the CPU with tiny shapes")
    ap.add_argument("--device", default=None, help="default: cuda (cpu with --dry-run)")
    ap.add_argument("--tokenizer", default=None, help="a tokenizer folder (default: the tiny character tokenizer)")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default: $OUT/gpu-check.json or ./)")
    ap.add_argument("--budget-s", type=float, default=None, help="seconds for all rows (default 450; dry run: none)")
    ap.add_argument(
        "--pairs",
        type=int,
        default=None,
        help="pairs of the exact scan (default 16; dry run: 4); as "
        "many again, split in two, find the circuit and measure its faithfulness",
    )
    ap.add_argument("--ref-pairs", type=int, default=2, help="pairs of the reference method")
    ap.add_argument("--scale-pairs", type=int, default=0, help="also time the bf16 exact scan on this many pairs")
    ap.add_argument(
        "--extended",
        action="store_true",
        help="the 7B shape only, with its lower-priority rows (float32 knockout and circuit, bf16 reference) given "
        "the whole budget: a second call after the full check",
    )
    ap.add_argument("--max-k", type=int, default=None, help="knockout curve: up to k heads (default 5; dry run: 3)")
    args = ap.parse_args(argv)
    _check_flags(args)
    os.environ.setdefault("MATHCIRCUITS_PROGRESS", "0")  # one table: the library's progress bars stay off
    args.pairs = args.pairs or (4 if args.dry_run else 16)
    args.max_k = args.max_k or (3 if args.dry_run else 5)

    dry = args.dry_run
    device = args.device or ("cpu" if dry else "cuda")  # checked by _check_flags: this machine has it
    budget = args.budget_s if args.budget_s is not None else (float("inf") if dry else 450.0)
    out = args.out or (Path(os.environ["OUT"]) / "gpu-check.json" if os.environ.get("OUT") else Path("gpu-check.json"))
    if dry:
        torch.set_num_threads(min(2, os.cpu_count() or 1))
    kind = "dry" if dry else "device"
    shapes = {name: s[kind] for name, s in SHAPES.items()}

    from transformers import AutoTokenizer

    from mathcircuits.models.compat import installed_versions
    from mathcircuits.models.tiny import tiny_tokenizer

    tok = AutoTokenizer.from_pretrained(args.tokenizer) if args.tokenizer else tiny_tokenizer()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    meta = {
        "device": torch.cuda.get_device_name() if device == "cuda" else f"cpu ({platform.processor() or 'x86'})",
        "dry_run": dry,
        "tokenizer": args.tokenizer or "tiny character tokenizer",
        "vocab": len(tok),
        "shapes": shapes,
        "budget_s": budget if math.isfinite(budget) else None,
        "peak_flops_assumed": PEAK_FLOPS,
        "versions": {**installed_versions(VERSIONS), "python": platform.python_version()},
    }
    check = Check(device, budget, out, meta, dry=dry)
    print(f"device check on {meta['device']}; tokenizer {meta['tokenizer']} ({len(tok)} tokens); JSON -> {out}")
    # most important first: the 7B shape's stages (its float32 twins of knockout and circuit only if the time left
    # still holds the rows after them), fine-tuning, generation, the pipeline, then the Llama-3 shape (GQA)
    label = {name: shape_label(name, shape, dry) for name, shape in shapes.items()}  # dry: the tiny shape's sizes
    run_shape_rows(check, tok, label["llama2-7b"], shapes["llama2-7b"], device, args, full=True)
    if args.extended:
        return finish(check, out)
    run_finetune_rows(check, tok, label["ft-1b"], shapes["ft-1b"], device, not dry)
    run_generation_rows(check, tok, label["llama2-7b"], shapes["llama2-7b"], device, not dry)
    with tempfile.TemporaryDirectory() as work:
        check.row("mathcircuits run tiny", "tiny-llama", "float32",
                  lambda r: r.extra.update(run_tiny_pipeline(device, dry, Path(work))), est_s=60)  # fmt: skip
    run_shape_rows(check, tok, label["llama3-8b"], shapes["llama3-8b"], device, args, full=False)
    return finish(check, out)


def finish(check: Check, out: Path) -> int:
    """Write the JSON, print the table and the run-time checks; 1 if a row failed."""
    check.meta["total_s"] = check.elapsed()
    check.write()
    print("\n" + HEADER)
    for r in check.rows:
        print(format_row(r))
    checks = [(r, c) for r in check.rows for c in r.extra.get("checks", [])]
    if checks:
        print("\nrun-time checks (difference <= tolerance; CPU seconds of the check):")
        for r, c in checks:
            print(f"  {r.shape:10} {r.dtype:9} {c['path']:38} {c['difference']:.3g} <= {c['tolerance']:.3g}"
                  f"  ({c['seconds']:.1f} s)")  # fmt: skip
    failed = [r for r in check.rows if r.status == "failed"]
    skipped = [r for r in check.rows if r.status == "skipped"]
    print(f"{len(check.rows)} rows: {len(failed)} failed, {len(skipped)} skipped, {check.elapsed():.0f} s; {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
