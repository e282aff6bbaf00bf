"""Data-parallel precise SFT on a CPU: 2 processes (torchrun, gloo) equal 1 process; resume works.

The effective batch is the same (1 process: 2 micro-batches of 4 accumulated; 2 processes: one
micro-batch of 4 each, gradients averaged by DDP), so the adapters must agree up to float
reduction order. Stated tolerance: absolute 1e-6 on every delta entry (their size is ~1e-2).
Each ``torchrun`` start costs ~10-30 s here (two Python processes importing torch and transformers).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mathcircuits.finetune import HeadSliceAdapter, SFTConfig, build_sft_dataset, train_sft
from mathcircuits.finetune.layouts import model_facts
from mathcircuits.models import Head, load_hf_model
from mathcircuits.patching import KeyComponents

pytestmark = pytest.mark.integration  # two processes (torchrun, gloo)

ROOT = Path(__file__).resolve().parents[1]
CONFIG = dict(
    learning_rate=1e-2,
    batch_size=8,
    micro_batch_size=4,
    max_steps=4,
    save_steps=2,
    logging_steps=1,
    weight_decay=0.1,
    warmup_ratio=0.25,
    progress_bar=False,
)
ATOL = 1e-6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(tmp: Path, out: Path, resume: bool = False) -> None:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port()),
        "-m", "mathcircuits.finetune.launch", "--model", "tiny-llama", "--data", str(tmp / "data"),
        "--key", str(tmp / "key.json"), "--config", str(tmp / "cfg.json"), "--out", str(out),
    ] + (["--resume"] if resume else [])  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def _deltas(folder: Path) -> dict[str, torch.Tensor]:
    adapter = HeadSliceAdapter.from_pretrained(load_hf_model("tiny-llama")[0], folder)
    return {s.name: d.detach().clone() for s, d in adapter.named_deltas()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    model, tok = load_hf_model("tiny-llama")
    rng = random.Random(0)
    records = []
    for _ in range(32):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        records.append(
            {
                "tokens": tok(f"{a}+{b}=", add_special_tokens=False)["input_ids"],
                "answer_tokens": tok(str(a + b), add_special_tokens=False)["input_ids"],
            }
        )
    data = build_sft_dataset(tok, records)
    data.save_to_disk(str(tmp / "data"))
    key = KeyComponents(model=model_facts(model), heads=(Head(0, 1), Head(2, 3)), mlps=(2,))
    key.save(tmp / "key.json")
    (tmp / "cfg.json").write_text(json.dumps(CONFIG))
    train_sft(model, tok, data, tmp / "one", key=key, config=SFTConfig(**CONFIG))
    _torchrun(tmp, tmp / "two")
    return tmp


def test_two_processes_equal_one(runs):
    one, two = _deltas(runs / "one" / "final"), _deltas(runs / "two" / "final")
    assert one.keys() == two.keys() and one
    for name in one:
        assert one[name].abs().max() > 1e-4, name  # training moved it
        torch.testing.assert_close(two[name], one[name], atol=ATOL, rtol=0, msg=name)
    logs = [json.loads(line) for line in (runs / "two" / "log.jsonl").read_text().splitlines()]
    assert max(e["step"] for e in logs) == 4  # one log (rank 0 only), four optimizer steps


def test_two_process_run_leaves_untouched_parameters_bit_identical(runs):
    base = {n: p.detach().clone() for n, p in load_hf_model("tiny-llama")[0].named_parameters()}
    adapter = HeadSliceAdapter.from_pretrained(load_hf_model("tiny-llama")[0], runs / "two" / "final")
    masks = {s.name: s.mask() for s in adapter.slices.slices}
    for name, p in adapter.merge_and_unload().named_parameters():
        keep = ~masks[name] if name in masks else torch.ones_like(p, dtype=torch.bool)
        assert torch.equal(p[keep], base[name][keep]), name


def test_two_process_resume_from_checkpoint(runs):
    out = runs / "resumed"
    shutil.copytree(runs / "two" / "checkpoint-2", out / "checkpoint-2")  # as if the 2-process run died at step 2
    _torchrun(runs, out, resume=True)
    steps = {json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines()}
    assert steps == {3, 4}  # only the missing steps ran
    uninterrupted, resumed = _deltas(runs / "two" / "final"), _deltas(out / "final")
    for name in uninterrupted:
        torch.testing.assert_close(resumed[name], uninterrupted[name], atol=1e-7, rtol=1e-6, msg=name)
