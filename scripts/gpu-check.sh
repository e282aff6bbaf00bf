#!/usr/bin/env bash
# One prepared device check: every stage on random-weight Llama-2-7B / Llama-3-8B shapes, on one GPU, in
# about 3.5 minutes (on an H200), nothing downloaded (scripts/gpu_check.py says what each row measures). Prints one table and writes
# it as JSON ($OUT/gpu-check.json where $OUT is set, else ./gpu-check.json). Exit code 1 if any row failed.
#
#   here, once:        bash scripts/gpu-wheels.sh          # .whl/ (packages the GPU image lacks) + .gpu-tokenizer/
#   on the GPU:        bash scripts/gpu-check.sh            # carry .whl and .gpu-tokenizer with the tree
#   here, on the CPU:  bash scripts/gpu-check.sh --dry-run  # the same code, tiny shapes (tests/test_gpu_check.py)
#
# Extra arguments go to scripts/gpu_check.py (--budget-s, --pairs, --ref-pairs, --out, --tokenizer, --device); they are
# checked before the first row (e.g. --device cuda:1 on a machine with one GPU is refused naming cuda:0).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
DRY=0
for a in "$@"; do [ "$a" = "--dry-run" ] && DRY=1; done
# The project's Python: $PYTHON if set, else .venv (scripts/setup.sh makes it), else a python3 that has torch (the GPU
# image's); never one without torch, which would fail only after the wheels were installed.
if [ -n "${PYTHON:-}" ]; then
  if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "error: PYTHON=$PYTHON is not an executable Python. Fix: point PYTHON at a Python with torch, or unset it to use .venv." >&2
    exit 2
  fi
elif [ -x "$ROOT/.venv/bin/python" ]; then
  PYTHON="$ROOT/.venv/bin/python"
elif command -v python3 >/dev/null 2>&1 && python3 -c "import torch" >/dev/null 2>&1; then
  PYTHON=python3
else
  echo "error: no Python with torch: $ROOT/.venv/bin/python does not exist and python3 $(command -v python3 >/dev/null 2>&1 && echo 'has no torch' || echo 'is not on PATH'). Fix: make the project's environment with bash scripts/setup.sh (it creates .venv), or set PYTHON to a Python that has torch." >&2
  exit 2
fi
# The GPU image lacks some of our dependencies (TransformerLens, datasets, plotly, ...): install the carried wheels
# beside it, without touching its own packages. Not in the dry run, which uses this machine's environment.
if [ "$DRY" = 0 ] && compgen -G ".whl/*.whl" >/dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "error: installing .whl/*.whl failed. Fix: rebuild them with bash scripts/gpu-wheels.sh" >&2; exit 2; }
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # the package is not pip-installed there
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
TOK=()
if [ "$DRY" = 0 ] && [ -f .gpu-tokenizer/tokenizer.json ] && [[ " $* " != *" --tokenizer "* ]]; then
  TOK=(--tokenizer .gpu-tokenizer)
fi
exec "$PYTHON" scripts/gpu_check.py "${TOK[@]}" "$@"
