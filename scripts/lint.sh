#!/usr/bin/env bash
# Static checks: ruff (style, imports, no print in the library) and the import-layer contract (import-linter).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
"$ROOT/.venv/bin/ruff" check mathcircuits tests benchmarks scripts
"$ROOT/.venv/bin/ruff" format --check mathcircuits tests benchmarks scripts
"$ROOT/.venv/bin/lint-imports" --no-cache
