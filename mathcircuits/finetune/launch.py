"""Data-parallel precise SFT from the command line: ``torchrun`` / ``accelerate launch`` run this module.

Every process loads the same model, data, key components and settings; ``Trainer`` shards each step's batch over
the processes and averages the gradients (DDP: NCCL on GPUs, gloo on CPU). Gradient accumulation is divided by the
number of processes, so 1 and N processes take the same optimizer steps on the same examples.

Example (2 processes on a CPU; ``--resume`` continues from the latest checkpoint)::

    torchrun --nproc_per_node 2 -m mathcircuits.finetune.launch \\
        --model tiny-llama --data runs/sft_data --key key_components.json \\
        --config sft.json --out runs/precise-ddp

``--data`` is a saved ``datasets`` folder (:func:`~mathcircuits.finetune.build_sft_dataset`), ``--key`` a saved
:class:`~mathcircuits.patching.KeyComponents` (omit it with ``mode: full``), ``--config`` a JSON of
:class:`~mathcircuits.finetune.SFTConfig` fields; the adapter goes to ``<out>/final``. GPUs:
docs/howto/big-models-on-gpu.md.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence

__all__: list[str] = []

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments and run :func:`~mathcircuits.finetune.train_sft` in this process."""
    import datasets
    import torch

    from mathcircuits.finetune import SFTConfig, train_sft
    from mathcircuits.models import load_hf_model
    from mathcircuits.patching import KeyComponents

    p = argparse.ArgumentParser(prog="python -m mathcircuits.finetune.launch", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="model source (embedded, tiny-llama, HF folder, Hub id)")
    p.add_argument("--data", required=True, help="datasets folder of SFT examples (input_ids, labels)")
    p.add_argument("--key", default=None, help="key_components.json (precise mode)")
    p.add_argument("--config", required=True, help="JSON file of SFTConfig fields")
    p.add_argument("--out", required=True, help="output folder (checkpoints, final/, sft_result.json)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--resume", action="store_true", help="resume from the latest checkpoint in --out")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    with open(args.config) as fh:
        config = SFTConfig.from_dict(json.load(fh))
    model, tok = load_hf_model(args.model, dtype=getattr(torch, args.dtype))
    data = datasets.load_from_disk(args.data)
    key = KeyComponents.load(args.key) if args.key else None
    _, result = train_sft(
        model, tok, data, args.out, key=key, config=config, resume_from_checkpoint=True if args.resume else None
    )
    log.info("finished: %d steps, train loss %.4f", result.global_step, result.train_loss)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
