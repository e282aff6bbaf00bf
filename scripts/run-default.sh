#!/usr/bin/env bash
# Main job on the embedded default model (SmolLM2-135M-Instruct): set-up, then the whole pipeline.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/mathcircuits" run --config configs/default.yaml --out "${1:-runs/default}"
