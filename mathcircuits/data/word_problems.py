"""Real word problems as direct-answer prompts (for transfer checks).

Reads the LLM-Adapters JSON format (a list of ``{"instruction", "input",
"output", "answer"}``) used by SVAMP, AddSub, SingleEq and GSM8K in
``../shared/data/benchmarks``. Each problem becomes a prompt
``"Question: …\\nAnswer: The answer is"`` followed by the integer answer, so
the same teacher-forced correctness check as for templates applies. Only
problems with a non-negative integer answer are kept.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from mathcircuits.data.generate import answer_spacing

__all__ = ["default_benchmark_root", "word_problem_dataset"]


def default_benchmark_root() -> Path | None:
    """``$MATHCIRCUITS_BENCHMARKS``, else ``../shared/data/benchmarks`` from the working folder, if it exists."""
    env = os.environ.get("MATHCIRCUITS_BENCHMARKS")
    for cand in ([Path(env)] if env else []) + [Path.cwd().parent / "shared" / "data" / "benchmarks", Path.cwd() / "shared" / "data" / "benchmarks"]:
        if cand.exists():
            return cand
    return None


def word_problem_dataset(tokenizer, path: str | Path, limit: int | None = 64, seed: int = 0, fewshot: int = 0):
    """A ``datasets.Dataset`` with ``tokens``, ``answer_tokens``, ``n_tokens`` (and prompt/answer text)."""
    import datasets

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"word-problem file {path} does not exist. Fix: pass a JSON file in the LLM-Adapters format (list of instruction/answer records).")
    try:
        records: Any = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}).") from err
    if not isinstance(records, list) or (records and not {"instruction", "answer"} <= set(records[0])):
        raise ValueError(f"{path} is not a list of records with 'instruction' and 'answer'. Fix: use the LLM-Adapters JSON format.")
    usable = []
    for r in records:
        try:
            value = float(str(r["answer"]).replace(",", ""))
        except ValueError:
            continue
        if value >= 0 and value == int(value):
            usable.append((r["instruction"].strip(), str(int(value))))
    rng = random.Random(seed)
    rng.shuffle(usable)
    shots, items = usable[:fewshot], usable[fewshot:]
    if limit is not None:
        items = items[:limit]
    spacing = answer_spacing(tokenizer)
    prefix = "".join(f"Question: {q}\nAnswer: The answer is {a}\n\n" for q, a in shots)
    rows = []
    for q, a in items:
        prompt = prefix + f"Question: {q}\nAnswer: The answer is" + (" " if spacing == "prompt" else "")
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        full = tokenizer(prompt + (a if spacing == "prompt" else " " + a), add_special_tokens=False)["input_ids"]
        if full[: len(ids)] != ids:
            continue
        rows.append({"prompt": prompt, "answer": a, "tokens": ids, "answer_tokens": full[len(ids):], "n_tokens": len(ids), "operation": "word_problem", "template_id": path.parent.name})
    if not rows:
        raise ValueError(f"{path}: no usable problems (integer answers) were found.")
    return datasets.Dataset.from_list(rows)
