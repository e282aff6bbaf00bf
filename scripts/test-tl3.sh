#!/usr/bin/env bash
# A second environment: TransformerLens 3.9 (which still has HookedTransformer beside the bridge) laid over the
# project's venv in .tl3/, for the tests of objects users bring (a TL 3 HookedTransformer is refused with the
# conversion; bridges and head slices work the same). Needs scripts/setup.sh first; pass pytest options after it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
if [ ! -f .tl3/.installed ]; then
  rm -rf .tl3
  "$PY" -m pip install -q --disable-pip-version-check --no-deps --target .tl3 "transformer-lens==3.9.0" better-abc
  touch .tl3/.installed
fi
PYTHONPATH="$ROOT/.tl3:$ROOT" "$PY" -c "import transformer_lens as t; from transformer_lens import HookedTransformer; print('[tl3] TransformerLens', t.__version__ if hasattr(t, '__version__') else '3.x', 'with HookedTransformer')"
PYTHONPATH="$ROOT/.tl3:$ROOT" exec "$PY" -m pytest -p no:cacheprovider "$@" tests/test_bring_your_own.py tests/test_slices_families.py
