"""Benchmark: precise SFT (key heads + MLPs) vs LoRA on the same parameter budget vs full SFT — throughput, memory.

The three modes run the same model, data, batch and optimizer (AdamW through HF
``Trainer``, :func:`mathcircuits.finetune.train_sft`), each in its own
subprocess so that peak memory is per mode. LoRA (PEFT, on every attention
projection) gets the rank whose parameter count is nearest to precise SFT's
(:func:`mathcircuits.finetune.compare.lora_rank_for_budget`). Reported per mode:

* ``samples/s``: training samples per second over the timed optimizer steps
  (after ``--warmup-steps`` untimed ones), forward + backward + optimizer step;
* memory: on CPU the peak resident set size during training minus the RSS
  just before it (model resident — its memory-mapped weights copied in — and
  data loaded), sampled every 5 ms with
  psutil (tracemalloc does not see torch's allocations), plus the process's
  absolute peak (``ru_maxrss``); on GPU ``torch.cuda.max_memory_allocated``.

Then the ratios precise / full and LoRA / full. On a shared machine timings swing with other
load, so the modes alternate for ``--rounds`` rounds and each mode's fastest
round is reported (like ``timeit``'s minimum). Usage::

    python benchmarks/bench_finetune.py                      # embedded SmolLM2-135M, ~2-3 min on 1 CPU thread
    python benchmarks/bench_finetune.py --model tiny-llama --heads 1.2,2.3 --mlps 2
    python benchmarks/bench_finetune.py --key key_components.json --out bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

# Key heads of SmolLM2-135M on addition (path patching, docs/transformerlens4-notes.md) and two late MLPs.
DEFAULT_HEADS = "14.2,18.5,14.1,13.6,21.2"
DEFAULT_MLPS = "14,18"
MODES = ("precise", "lora", "full")


def _parse_heads(text: str) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in item.split(".")) for item in text.split(",") if item]  # type: ignore[misc]


class _PeakRSS:
    """Sample the process RSS in a background thread and keep the maximum."""

    def __init__(self, interval: float = 0.005) -> None:
        import psutil

        self.proc, self.interval, self.peak = psutil.Process(), interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.interval)

    def __enter__(self) -> "_PeakRSS":
        self.start = self.proc.memory_info().rss
        self.peak = self.start
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def worker(args: argparse.Namespace) -> dict:
    import gc
    import tempfile

    import torch
    from transformers import TrainerCallback

    from mathcircuits.data import GenerationConfig, generate_pairs, load_templates
    from mathcircuits.finetune import SFTConfig, build_sft_dataset, head_slices, train_sft
    from mathcircuits.finetune.components import lora_rank_for_budget
    from mathcircuits.models import load_hf_model
    from mathcircuits.patching.selection import KeyComponents

    torch.set_num_threads(args.threads)
    device = "cpu" if args.cpu else args.device
    model, tok = load_hf_model(args.model, device=device)
    with torch.no_grad():  # safetensors weights are memory-mapped and paged in lazily: make them resident first,
        for prm in model.parameters():  # or the first forward would count the model itself as training memory
            prm.data = prm.data.clone()
    pairs = generate_pairs(
        tok,
        load_templates(),
        GenerationConfig(
            operations=("add", "sub"), n_per_template=8, operand_range=(1, 50), fewshot=args.fewshot, seed=0
        ),
    )
    data = build_sft_dataset(tok, pairs).shuffle(seed=0)
    key = KeyComponents.load(args.key) if args.key else None
    slices = head_slices(
        model,
        key if key is not None else _parse_heads(args.heads),
        kv_policy=args.kv_policy,
        mlps=[] if key is not None else [int(m) for m in args.mlps.split(",") if m],
    )
    lora_rank, _ = lora_rank_for_budget(model, slices.n_tuned)  # LoRA on precise SFT's parameter budget
    if args.mode != "precise":
        slices = None
    n_steps = args.warmup_steps + args.steps
    cfg = SFTConfig(
        mode=args.mode,
        micro_batch_size=args.micro_batch,
        batch_size=args.micro_batch * args.accum,
        max_steps=n_steps,
        kv_policy=args.kv_policy,
        lora_rank=lora_rank,
        logging_steps=10_000,
        save_final=False,
        progress_bar=False,
        warmup_ratio=0.0,
    )
    stamps: list[float] = []

    class Stamp(TrainerCallback):
        def on_step_end(self, a, state, control, **kw):  # noqa: ANN001
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            stamps.append(time.perf_counter())

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        base_gpu = torch.cuda.memory_allocated()
    with tempfile.TemporaryDirectory() as out, _PeakRSS() as rss:
        trained, result = train_sft(model, tok, data, out, key=slices, config=cfg, callbacks=[Stamp()])
    timed = stamps[args.warmup_steps - 1 :] if args.warmup_steps else stamps
    samples = (len(timed) - 1) * args.micro_batch * args.accum
    report = {
        "mode": args.mode,
        "model": args.model,
        "device": device,
        "threads": args.threads,
        "micro_batch": args.micro_batch,
        "accum": args.accum,
        "timed_steps": len(timed) - 1,
        "samples_per_s": samples / (timed[-1] - timed[0]),
        "n_trainable": result.n_trainable,
        "lora_rank": lora_rank if args.mode == "lora" else None,
        "n_model_params": result.n_model_params,
        "rss_before_mb": rss.start / 2**20,
        "rss_peak_delta_mb": (rss.peak - rss.start) / 2**20,
        "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "mean_seq_len": sum(len(x) for x in data["input_ids"]) / len(data),
        "final_loss": result.loss_history[-1][1] if result.loss_history else None,
    }
    if device.startswith("cuda"):
        report["gpu_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
        report["gpu_peak_delta_mb"] = (torch.cuda.max_memory_allocated() - base_gpu) / 2**20
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="embedded", help="embedded | tiny-llama | tiny-gpt2 | HF folder")
    p.add_argument("--heads", default=DEFAULT_HEADS, help="key heads as layer.head,... (ignored with --key)")
    p.add_argument("--mlps", default=DEFAULT_MLPS, help="key MLP layers, comma-separated (ignored with --key)")
    p.add_argument("--key", default=None, help="a KeyComponents JSON instead of --heads/--mlps")
    p.add_argument("--kv-policy", default="group")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--accum", type=int, default=1, help="gradient accumulation steps per optimizer step")
    p.add_argument("--steps", type=int, default=6, help="timed optimizer steps")
    p.add_argument("--warmup-steps", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2, help="runs per mode, alternating; the fastest is reported")
    p.add_argument("--fewshot", action="store_true", help="few-shot arithmetic prompts (longer sequences)")
    p.add_argument("--device", default="cpu", help="where the model trains: cpu, cuda, cuda:1, ...")
    p.add_argument("--cpu", action="store_true", help="the same as --device cpu (kept for old command lines)")
    p.add_argument("--out", default=None, help="write the three reports and the ratios as JSON")
    p.add_argument("--worker", default=None, choices=list(MODES), help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        args.mode = args.worker
        print("REPORT " + json.dumps(worker(args)), flush=True)  # noqa: T201
        return 0

    reports = {}
    forwarded = [
        "--model",
        args.model,
        "--heads",
        args.heads,
        "--mlps",
        args.mlps,
        "--kv-policy",
        args.kv_policy,
        "--micro-batch",
        str(args.micro_batch),
        "--accum",
        str(args.accum),
        "--steps",
        str(args.steps),
        "--warmup-steps",
        str(args.warmup_steps),
        "--threads",
        str(args.threads),
        "--device",
        args.device,
    ]
    forwarded += (
        (["--key", args.key] if args.key else [])
        + (["--fewshot"] if args.fewshot else [])
        + (["--cpu"] if args.cpu else [])
    )
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false"}
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    for _ in range(args.rounds):  # alternate the modes; on a shared machine keep each mode's best round
        for mode in MODES:
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, __file__, *forwarded, "--worker", mode], capture_output=True, text=True, env=env
            )
            lines = [l for l in proc.stdout.splitlines() if l.startswith("REPORT ")]
            if proc.returncode or not lines:
                sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
                raise SystemExit(f"{mode} worker failed (exit {proc.returncode})")
            runs[mode].append({**json.loads(lines[-1][len("REPORT ") :]), "wall_s": time.perf_counter() - t0})
    for mode, rs in runs.items():
        reports[mode] = {
            **max(rs, key=lambda r: r["samples_per_s"]),
            "samples_per_s_rounds": [r["samples_per_s"] for r in rs],
        }

    pr, lo, fu = reports["precise"], reports["lora"], reports["full"]
    mem_key = "gpu_peak_delta_mb" if pr["device"].startswith("cuda") else "rss_peak_delta_mb"
    ratios = {
        "throughput_precise_over_full": pr["samples_per_s"] / fu["samples_per_s"],
        "train_memory_precise_over_full": pr[mem_key] / fu[mem_key] if fu[mem_key] > 0 else float("nan"),
        "peak_memory_precise_over_full": (pr["gpu_peak_mb"] / fu["gpu_peak_mb"])
        if pr["device"].startswith("cuda")
        else pr["ru_maxrss_mb"] / fu["ru_maxrss_mb"],
        "trainable_fraction": pr["n_trainable"] / pr["n_model_params"],
        "throughput_lora_over_full": lo["samples_per_s"] / fu["samples_per_s"],
        "train_memory_lora_over_full": lo[mem_key] / fu[mem_key] if fu[mem_key] > 0 else float("nan"),
        "lora_params_over_precise": lo["n_trainable"] / pr["n_trainable"],
    }
    rows = [
        ("samples/s", "samples_per_s", "{:.2f}"),
        ("trainable params", "n_trainable", "{:,}"),
        ("train memory (peak - before), MB", mem_key, "{:.0f}"),
        ("process peak, MB", "gpu_peak_mb" if pr["device"].startswith("cuda") else "ru_maxrss_mb", "{:.0f}"),
        ("wall time of the run, s", "wall_s", "{:.0f}"),
    ]
    print(
        f"model={pr['model']} device={pr['device']} threads={pr['threads']} micro_batch={pr['micro_batch']} "
        f"accum={pr['accum']} "  # noqa: T201
        f"timed_steps={pr['timed_steps']} mean_seq_len={pr['mean_seq_len']:.1f} rounds={args.rounds}"
    )
    print(
        "samples/s per round: "
        + "  ".join(f"{m}: {', '.join(f'{x:.2f}' for x in reports[m]['samples_per_s_rounds'])}" for m in reports)
    )  # noqa: T201
    print(f"{'':36s}{'precise':>14s}{'lora r=' + str(lo['lora_rank']):>14s}{'full':>14s}")  # noqa: T201
    for label, k, fmt in rows:
        print(f"{label:36s}{fmt.format(pr[k]):>14s}{fmt.format(lo[k]):>14s}{fmt.format(fu[k]):>14s}")  # noqa: T201
    for k, v in ratios.items():
        print(f"{k:36s}{v:>14.3f}")  # noqa: T201
    if args.out:
        Path(args.out).write_text(
            json.dumps({"precise": pr, "lora": lo, "full": fu, "ratios": ratios}, indent=2) + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
