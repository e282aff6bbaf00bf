"""One prepared device check (issue #33): every stage on random-weight 7B-shaped models, on one GPU, in ~8 minutes.

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
skipped there. The test suite runs it (``tests/test_gpu_check.py``). On the device: ``bash scripts/gpu-check.sh`` (see
``docs/howto/big-models-on-gpu.md``, "Check a GPU in one command").
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import torch

ROOT = Path(__file__).resolve().parent.parent

#: shape name → LlamaConfig sizes, on the device and in the dry run.
SHAPES: dict[str, dict[str, dict[str, int]]] = {
    "llama2-7b": {
        "device": dict(layers=32, heads=32, kv_heads=32, d_model=4096, d_mlp=11008),
        "dry": dict(layers=2, heads=4, kv_heads=4, d_model=64, d_mlp=128),
    },
    "llama3-8b": {
        "device": dict(layers=32, heads=32, kv_heads=8, d_model=4096, d_mlp=14336),
        "dry": dict(layers=2, heads=4, kv_heads=2, d_model=64, d_mlp=176),
    },
    "ft-1b": {
        "device": dict(layers=16, heads=32, kv_heads=8, d_model=2048, d_mlp=8192),
        "dry": dict(layers=2, heads=4, kv_heads=2, d_model=64, d_mlp=128),
    },
}
PEAK_FLOPS = {"bfloat16": 700e12, "float32": 60e12}  # dense peaks assumed for the floor (module docstring)
VERSIONS = ("mathcircuits", "torch", "transformers", "transformer-lens", "peft", "accelerate", "datasets", "pyarrow",
            "tokenizers", "plotly", "circuitsvis")  # fmt: skip
RESERVE_S = 240  # seconds kept for the rows after the 7B shape's optional float32 twins (fine-tuning ... Llama-3)
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


def mlp_rows(layers: int, heads: int) -> int:
    """Downstream last-position MLP rows per pair and position: H·L(L+1)/2 for the heads, L(L-1)/2 for the MLPs."""
    return heads * layers * (layers + 1) // 2 + layers * (layers - 1) // 2


def floor_per_pair(shape: dict[str, int], positions: float, dtype: str) -> float:
    """Seconds per pair of the exact scan's MLP rows at the dtype's assumed peak (module docstring)."""
    flops = mlp_rows(shape["layers"], shape["heads"]) * 6 * shape["d_model"] * shape["d_mlp"] * positions
    return flops / PEAK_FLOPS[dtype]


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
        from mathcircuits.models import MemoryMeter

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


# --- the models ---------------------------------------------------------------------------------------------------


def hf_config(tok: Any, shape: dict[str, int]) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=shape["d_model"],
        intermediate_size=shape["d_mlp"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        max_position_embeddings=2048,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )


def build_hf(tok: Any, shape: dict[str, int], dtype: torch.dtype, device: str, seed: int = 0) -> Any:
    """A random-weight plain HF Llama of ``shape``, made directly on ``device`` in ``dtype`` (eval mode)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(hf_config(tok, shape), dtype=dtype)
    return model.eval()


def build_pair(tok: Any, shape: dict[str, int], device: str, name: str) -> dict[str, Any]:
    """The float32 model and its bf16 copy (same weights, rounded), both wrapped as hooked models."""
    from mathcircuits.models import from_hf

    hf32 = build_hf(tok, shape, torch.float32, device)
    hf16 = build_hf(tok, shape, torch.bfloat16, device, seed=1)
    hf16.load_state_dict(hf32.state_dict())  # cast on copy: the bf16 model is the float32 one, rounded
    return {"float32": from_hf(hf32, tok, name=name), "bfloat16": from_hf(hf16, tok, name=name)}


# --- the stages ---------------------------------------------------------------------------------------------------


def make_pairs(tok: Any, n: int, seed: int = 0, fewshot: bool = True) -> Any:
    """Addition pairs of one template, operands 1-99 (answers of 1-3 digits: ~2.5 answer tokens on SmolLM2).

    The dry run leaves out the few-shot prefix: the character tokenizer makes it ~200 tokens, and bf16 matrix
    products are slow on a CPU.
    """
    from mathcircuits.data import GenerationConfig, generate_pairs, load_templates

    cfg = GenerationConfig(operations=("add",), template_ids=("add_eq_1",), n_per_template=n, operand_range=(1, 99),
                           fewshot=fewshot, seed=seed)  # fmt: skip
    return generate_pairs(tok, load_templates(), cfg)


def mean_positions(pairs: Any) -> float:
    return sum(len(a) for a in pairs["answer_tokens"]) / len(pairs)


def run_tiny_pipeline(device: str, dry: bool, workdir: Path) -> dict[str, Any]:
    """``mathcircuits run`` on configs/tiny.yaml with ``model.device`` set, in a subprocess."""
    import yaml

    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["model"]["device"] = device
    path = workdir / "tiny-device.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "mathcircuits.cli", "run", "--config", str(path), "--out", str(workdir / "run"),
           "--quiet"]  # fmt: skip
    if dry:  # the dry run stops after the first stages that load the model on the device (the test's time)
        cmd += ["--only", "data", "identify"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise RuntimeError(f"mathcircuits run exited {proc.returncode}: " + " | ".join(tail))
    return {"stages": "data, identify" if dry else "all", "command": " ".join(cmd[1:])}


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
    args.pairs = args.pairs or (4 if args.dry_run else 16)
    args.max_k = args.max_k or (3 if args.dry_run else 5)

    dry = args.dry_run
    device = args.device or ("cpu" if dry else "cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device. Fix: run on the GPU machine, or pass --dry-run for the CPU check.")
    budget = args.budget_s if args.budget_s is not None else (float("inf") if dry else 450.0)
    out = args.out or (Path(os.environ["OUT"]) / "gpu-check.json" if os.environ.get("OUT") else Path("gpu-check.json"))
    if dry:
        torch.set_num_threads(min(2, os.cpu_count() or 1))
    kind = "dry" if dry else "device"
    shapes = {name: s[kind] for name, s in SHAPES.items()}

    from transformers import AutoTokenizer

    from mathcircuits.models import tiny_tokenizer
    from mathcircuits.models.compat import installed_versions

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
    run_shape_rows(check, tok, "llama2-7b", shapes["llama2-7b"], device, args, full=True)
    if args.extended:
        return finish(check, out)
    run_finetune_rows(check, tok, "ft-1b", shapes["ft-1b"], device, not dry)
    run_generation_rows(check, tok, "llama2-7b", shapes["llama2-7b"], device, not dry)
    with tempfile.TemporaryDirectory() as work:
        check.row("mathcircuits run tiny", "tiny-llama", "float32",
                  lambda r: r.extra.update(run_tiny_pipeline(device, dry, Path(work))), est_s=60)  # fmt: skip
    run_shape_rows(check, tok, "llama3-8b", shapes["llama3-8b"], device, args, full=False)
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


def run_shape_rows(check: Check, tok: Any, name: str, shape: dict[str, int], device: str, args: Any,
                   full: bool) -> None:  # fmt: skip
    """The identifying and analysing stages on one shape: bf16 first, float32 beside it for agreement."""
    from mathcircuits.ablation import knockout_curve
    from mathcircuits.analysis import attention_by_role, mlp_probes
    from mathcircuits.circuit import discover_circuit, faithfulness
    from mathcircuits.numbers import mod_probes, number_contexts, number_states
    from mathcircuits.patching import compare_rankings, path_patch

    big = device == "cuda"
    models = check.row("build fp32 + bf16 copy", name, "both", lambda r: build_pair(tok, shape, device, name),
                       est_s=40 if big else 0)  # fmt: skip
    pairs = check.row("data: generate_pairs", name, "-",
                      lambda r: make_pairs(tok, args.pairs * 2, fewshot=not args.dry_run))  # fmt: skip
    if pairs is not None:
        scan, circuit_pairs = pairs.select(range(args.pairs)), pairs.select(range(args.pairs, len(pairs)))
    else:
        scan = circuit_pairs = None
    have = (("models", models), ("pairs", pairs))
    res: dict[str, Any] = {}

    def exact(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            t = time.perf_counter()
            result = path_patch(models[dtype], scan, method="exact", keep_per_pair=True)
            check._sync()
            r.per_pair_s = (time.perf_counter() - t) / len(scan)
            pos = mean_positions(scan)
            r.floor_per_pair_s = floor_per_pair(shape, pos, dtype)
            r.note = f"{r.per_pair_s / r.floor_per_pair_s:.1f}x the floor"
            r.extra.update(pairs=len(scan), answer_positions=round(pos, 2), mlp_rows=mlp_rows(shape["layers"],
                           shape["heads"]), senders=shape["layers"] * (shape["heads"] + 1))  # fmt: skip
            return result

        return fn

    def timed_exact(dtype: str) -> Any:
        # a warm-up on 2 pairs first (kernels, the run-time checks of the fast paths), so the timed row is the scan
        check.row("exact warm-up (2 pairs)", name, dtype,
                  lambda r: path_patch(models[dtype], scan.select(range(2)), method="exact"), needs=have,
                  est_s=20 if big else 0)  # fmt: skip
        return check.row("exact scan", name, dtype, exact(dtype), needs=have, est_s=30 if big else 0)

    res["exact16"] = timed_exact("bfloat16")

    def profile(r: Row) -> None:
        """Where the bf16 scan's time goes: the operations with the largest device time, on 4 pairs."""
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        sub = scan.select(range(min(4, len(scan))))
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with torch_profile(activities=activities) as prof:
            path_patch(models["bfloat16"], sub, method="exact")
            check._sync()
        events = prof.key_averages()
        attr = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
        top = sorted(events, key=lambda e: getattr(e, attr, 0), reverse=True)[:15]
        total = sum(getattr(e, attr, 0) for e in events) or 1
        r.extra["profile"] = [
            {"op": e.key[:80], "ms": round(getattr(e, attr, 0) / 1e3, 2),
             "share": round(getattr(e, attr, 0) / total, 3), "calls": e.count} for e in top
        ]  # fmt: skip
        r.note = "; ".join(f"{p['op'][:40]} {p['share']:.0%}" for p in r.extra["profile"][:4])

    check.row("exact scan profile (4 pairs)", name, "bfloat16", profile, needs=(*have, ("exact", res["exact16"])),
              est_s=15 if big else 0)  # fmt: skip
    more = make_pairs(tok, args.scale_pairs, seed=1, fewshot=not args.dry_run) if args.scale_pairs else None

    def scaled(r: Row) -> Any:
        t = time.perf_counter()
        result = path_patch(models["bfloat16"], more, method="exact", batch_size=64)
        check._sync()
        r.per_pair_s = (time.perf_counter() - t) / len(more)
        r.floor_per_pair_s = floor_per_pair(shape, mean_positions(more), "bfloat16")
        r.note = f"{len(more)} pairs, batch_size 64; {r.per_pair_s / r.floor_per_pair_s:.1f}x the floor"
        return result

    if more is not None:
        check.row(f"exact scan ({len(more)} pairs)", name, "bfloat16", scaled, needs=have, est_s=15 if big else 0)
    res["exact32"] = timed_exact("float32")

    def exact_vs_fp32(row: Row) -> None:
        row.agree_fp32 = rel_diff(res["exact16"].per_pair_heads, res["exact32"].per_pair_heads)
        row.extra["agree_fp32_mlps"] = rel_diff(res["exact16"].per_pair_mlps, res["exact32"].per_pair_mlps)
        row.extra["rankings_vs_fp32"] = compare_rankings(res["exact16"], res["exact32"], k=10)

    check.compare("exact scan", name, "bfloat16", exact_vs_fp32, res["exact16"], res["exact32"])

    def reference(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            sub = scan.select(range(args.ref_pairs))
            ref = path_patch(models[dtype], sub, method="reference", keep_per_pair=True)
            ex = res["exact32" if dtype == "float32" else "exact16"]
            r.agree_ref = rel_diff(ex.per_pair_heads[: len(sub)], ref.per_pair_heads)
            r.extra["agree_ref_mlps"] = rel_diff(ex.per_pair_mlps[: len(sub)], ref.per_pair_mlps)
            r.extra["max_abs_diff_heads"] = float((ex.per_pair_heads[: len(sub)] - ref.per_pair_heads).abs().max())
            r.note = f"exact vs reference on {len(sub)} pairs ({shape['layers'] * (shape['heads'] + 1)} forwards)"
            return ref

        return fn

    check.row("reference scan", name, "float32", reference("float32"), needs=(*have, ("exact fp32", res["exact32"])),
              est_s=90 if big else 0)  # fmt: skip

    def knockout(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            patching = res["exact16" if dtype == "bfloat16" else "exact32"]
            k = knockout_curve(models[dtype], scan, patching, max_k=args.max_k, n_random=2, seed=0)
            r.extra["ranked_accuracy"] = k.ranked_accuracy
            r.note = "random weights: accuracies are ~0 (no correctness filter)"
            return k

        return fn

    res["knock16"] = check.row("knockout + random ctl", name, "bfloat16", knockout("bfloat16"),
                               needs=(*have, ("exact bf16", res["exact16"])), est_s=30 if big else 0,
                               optional=not full)  # fmt: skip

    def circuit(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            n = len(circuit_pairs) // 2
            disc, ev = circuit_pairs.select(range(n)), circuit_pairs.select(range(n, 2 * n))
            # the dry run: one sender per answer position and two receiver kinds (a query, a KV group), for time
            size = dict(logits_top_k=2) if big else dict(logits_top_k=1, receivers=("q", "v"))
            found = discover_circuit(models[dtype], disc, depth=1, top_k=1, n_boot=50, batch_size=8,
                                     max_seconds=60 if big else None, **size)  # fmt: skip
            faith = faithfulness(models[dtype], ev, found, ablations=("resample",), points=3, n_random=2,
                                 completeness_sets=1, n_boot=50)  # fmt: skip
            r.extra.update(nodes=len(found.nodes) - 1, edges=len(found.edges), stopped=str(found.settings.stopped),
                           plateau_size=getattr(faith, "plateau_size", None), pairs=f"{n} + {n}")  # fmt: skip
            r.note = f"{len(found.nodes) - 1} nodes, {len(found.edges)} edges; faithfulness on {n} other pairs"
            return {(nd.kind, nd.layer, nd.head, nd.position) for nd in found.nodes}

        return fn

    res["circ16"] = check.row("circuit + faithfulness", name, "bfloat16", circuit("bfloat16"), needs=have,
                              est_s=90 if big else 0, optional=not full)  # fmt: skip
    if not full:
        return

    def attribution(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            # the screen differentiates a first-token metric: prob_change, compared with the exact scan of the same
            t = time.perf_counter()
            att = path_patch(models[dtype], scan, method="attribution", metric="prob_change", keep_per_pair=True)
            check._sync()
            r.per_pair_s = (time.perf_counter() - t) / len(scan)
            ex = path_patch(models[dtype], scan, method="exact", metric="prob_change", keep_per_pair=True)
            r.agree_ref = rel_diff(att.per_pair_heads, ex.per_pair_heads)
            r.extra["rankings_vs_exact"] = compare_rankings(att, ex, k=10)
            r.note = (f"prob_change; vs ref = vs the exact scan (a first-order screen); Spearman "
                      f"{r.extra['rankings_vs_exact']['spearman_heads']:.2f}; s/pair: the screen alone")  # fmt: skip
            return att

        return fn

    att = {d: check.row("attribution scan", name, d, attribution(d), needs=(*have, ("exact", res["exact16"])),
                        est_s=20 if big else 0) for d in ("bfloat16", "float32")}  # fmt: skip

    def att_vs_fp32(row: Row) -> None:
        row.agree_fp32 = rel_diff(att["bfloat16"].per_pair_heads, att["float32"].per_pair_heads)

    check.compare("attribution scan", name, "bfloat16", att_vs_fp32, att["bfloat16"], att["float32"])

    def top_heads() -> list[tuple[int, int]]:
        return [(l, h) for l, h, _ in res["exact16"].top_heads(4)]

    def roles(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            out = attention_by_role(models[dtype], scan, top_heads())
            probes = mlp_probes(models[dtype], scan)
            r.note = "attention by role (top 4 heads) + MLP probes"
            return out, probes

        return fn

    an = {d: check.row("attention + MLP probes", name, d, roles(d), needs=(*have, ("exact bf16", res["exact16"])),
                       est_s=20 if big else 0) for d in ("bfloat16", "float32")}  # fmt: skip

    def roles_vs_fp32(row: Row) -> None:
        row.agree_fp32 = float((an["bfloat16"][0].shares - an["float32"][0].shares).abs().max())
        lens = (an["bfloat16"][1].lens_prob - an["float32"][1].lens_prob).abs().max()
        row.extra["lens_prob_max_abs_diff"] = float(lens)
        row.note += "; vs fp32: largest attention-share difference"

    check.compare("attention + MLP probes", name, "bfloat16", roles_vs_fp32, an["bfloat16"], an["float32"])

    def numbers(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            from mathcircuits.data import load_templates

            contexts = number_contexts(tok, load_templates(), ("add",), 2)
            states = number_states(models[dtype], range(100), contexts)
            L = shape["layers"]
            probes = mod_probes(states, periods=(2, 5, 10), folds=2, n_boot=50, depths=[L // 2, L])
            r.note = f"number states 0-99 in {len(contexts)} contexts; mod-T probes at depths {L // 2}, {L}"
            r.extra["probe"] = type(probes).__name__
            return states

        return fn

    nums = {d: check.row("numbers: states+probes", name, d, numbers(d), needs=have, est_s=30 if big else 0)
            for d in ("bfloat16", "float32")}  # fmt: skip

    def nums_vs_fp32(row: Row) -> None:
        row.agree_fp32 = rel_diff(nums["bfloat16"].states, nums["float32"].states)

    check.compare("numbers: states+probes", name, "bfloat16", nums_vs_fp32, nums["bfloat16"], nums["float32"])

    # lower priority: the float32 knockout and circuit, and the bf16 reference, if the rows after them still fit
    reserve = RESERVE_S if big and not args.extended else 0
    k32 = check.row("knockout + random ctl", name, "float32", knockout("float32"), optional=True,
                    needs=(*have, ("exact fp32", res["exact32"])), est_s=40 + reserve if big else 0)  # fmt: skip

    def knock_vs_fp32(row: Row) -> None:
        row.agree_fp32 = max(abs(a - b) for a, b in zip(res["knock16"].ranked_accuracy, k32.ranked_accuracy))
        row.note += "; vs fp32: largest accuracy difference on the curve"

    check.compare("knockout + random ctl", name, "bfloat16", knock_vs_fp32, k32, res["knock16"])
    c32 = check.row("circuit + faithfulness", name, "float32", circuit("float32"), needs=have, optional=True,
                    est_s=120 + reserve if big else 0)  # fmt: skip

    def circ_vs_fp32(row: Row) -> None:
        row.agree_fp32 = 1 - len(c32 & res["circ16"]) / max(1, len(c32 | res["circ16"]))
        row.note += "; vs fp32: 1 - Jaccard of the node sets"

    check.compare("circuit + faithfulness", name, "bfloat16", circ_vs_fp32, c32, res["circ16"])
    check.row("reference scan", name, "bfloat16", reference("bfloat16"), needs=(*have, ("exact bf16", res["exact16"])),
              optional=True, est_s=60 + reserve if big else 0)  # fmt: skip
    check.write()
    models = None  # the closures above hold the models: release them before the next shape is built
    res.clear()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def run_finetune_rows(check: Check, tok: Any, name: str, shape: dict[str, int], device: str, fewshot: bool) -> None:
    """Precise SFT, LoRA on precise's parameter budget, and full SFT: a few AdamW steps each, samples/s."""
    from transformers import TrainerCallback

    from mathcircuits.finetune import SFTConfig, build_sft_dataset, head_slices, lora_rank_for_budget, train_sft

    L, H = shape["layers"], shape["heads"]
    heads = sorted({(L - 1, 0), (L - 2, 1 % H), (L // 2, 3 % H), (L // 3, 2 % H), (0, H - 1)})
    mlps = sorted({L - 2, L - 1})
    pairs = make_pairs(tok, 64, seed=1, fewshot=fewshot)
    data = build_sft_dataset(tok, pairs).shuffle(seed=0)
    micro, warm, timed = 8, 1, 3
    budget_box: dict[str, int] = {}

    def mode_fn(mode: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            model = build_hf(tok, shape, torch.float32, device)  # float32 master weights (bf16 autocast on CUDA)
            slices = head_slices(model, heads, mlps=mlps)
            budget_box.setdefault("n", slices.n_tuned)
            rank, _ = lora_rank_for_budget(model, budget_box["n"])
            stamps: list[float] = []

            class Stamp(TrainerCallback):
                def on_step_end(self, a, state, control, **kw):  # noqa: ANN001
                    check._sync()
                    stamps.append(time.perf_counter())

            cfg = SFTConfig(mode=mode, micro_batch_size=micro, batch_size=micro, max_steps=warm + timed,
                            lora_rank=rank, logging_steps=10_000, save_final=False, progress_bar=False,
                            warmup_ratio=0.0, bf16=device == "cuda")  # fmt: skip
            with tempfile.TemporaryDirectory() as out:
                _, result = train_sft(model, tok, data, out, key=slices if mode == "precise" else None, config=cfg,
                                      callbacks=[Stamp()])  # fmt: skip
            sps = timed * micro / (stamps[-1] - stamps[warm - 1])
            r.extra.update(samples_per_s=sps, n_trainable=result.n_trainable, n_params=result.n_model_params,
                           lora_rank=rank if mode == "lora" else None, steps=f"{warm} warm-up + {timed} timed",
                           micro_batch=micro)  # fmt: skip
            r.note = (f"{sps:.1f} samples/s; {result.n_trainable:,} trainable of {result.n_model_params:,}"
                      + (f" (LoRA rank {rank})" if mode == "lora" else "")
                      + "; 1B shape: full AdamW SFT of 7B needs ~110 GB")  # fmt: skip
            del model
            return sps

        return fn

    for mode in ("precise", "lora", "full"):
        check.row(f"SFT {mode}", name, "bf16 amp" if device == "cuda" else "float32", mode_fn(mode),
                  est_s=45 if device == "cuda" else 0)  # fmt: skip
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()


def run_generation_rows(check: Check, tok: Any, name: str, shape: dict[str, int], device: str, fewshot: bool) -> None:
    """Greedy generation on a few held-out arithmetic items, bf16 beside float32 (the same weights)."""
    from mathcircuits.evaluation import generate_greedy

    prompts = list(make_pairs(tok, 8, seed=2, fewshot=fewshot)["prompt"])
    texts: dict[str, list[str]] = {}

    def gen(dtype: str) -> Callable[[Row], Any]:
        def fn(r: Row) -> Any:
            model = build_hf(tok, shape, torch.float32, device)
            if dtype == "bfloat16":
                model = model.to(torch.bfloat16)
            out = generate_greedy(model, tok, prompts, max_new_tokens=8, batch_size=8)
            r.note = f"{len(prompts)} items, 8 new tokens each"
            texts[dtype] = out
            del model
            return out

        return fn

    for dtype in ("float32", "bfloat16"):
        check.row("generation", name, dtype, gen(dtype), est_s=40 if device == "cuda" else 0)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()

    def gen_vs_fp32(row: Row) -> None:
        row.agree_fp32 = 1 - sum(a == b for a, b in zip(texts["bfloat16"], texts["float32"])) / len(prompts)
        row.note += "; vs fp32: share of continuations that differ"

    check.compare("generation", name, "bfloat16", gen_vs_fp32, texts.get("bfloat16"), texts.get("float32"))


if __name__ == "__main__":
    raise SystemExit(main())
