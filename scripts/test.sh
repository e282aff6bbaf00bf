#!/usr/bin/env bash
# Set-up, then the whole test suite (unit tests on tiny models, slow tests on the embedded model, notebooks).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m pytest "$@"
