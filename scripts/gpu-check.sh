#!/usr/bin/env bash
# One prepared device check: every stage on random-weight Llama-2-7B / Llama-3-8B shapes, on one GPU, in
# about 8 minutes, nothing downloaded (scripts/gpu_check.py says what each row measures). Prints one table and writes
# it as JSON ($OUT/gpu-check.json where $OUT is set, else ./gpu-check.json). Exit code 1 if any row failed.
#
#   here, once:        bash scripts/gpu-wheels.sh          # .whl/ (packages the GPU image lacks) + .gpu-tokenizer/
#   on the GPU:        bash scripts/gpu-check.sh            # carry .whl and .gpu-tokenizer with the tree
#   here, on the CPU:  bash scripts/gpu-check.sh --dry-run  # the same code, tiny shapes (tests/test_gpu_check.py)
#
# Extra arguments go to scripts/gpu_check.py (--budget-s, --pairs, --ref-pairs, --out, --tokenizer, --device).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
DRY=0
for a in "$@"; do [ "$a" = "--dry-run" ] && DRY=1; done
if [ -z "${PYTHON:-}" ]; then
  if [ "$DRY" = 1 ] && [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
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
