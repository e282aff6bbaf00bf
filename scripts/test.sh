#!/usr/bin/env bash
# Set-up, then the whole test suite (unit tests on tiny models, integration tests, slow tests on the embedded model,
# notebooks). The fast loop while editing: scripts/test.sh -m "not slow and not integration" (its time:
# docs/times-and-exit-codes.md). Without -m every tier runs, as in CI.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
# One pytest worker per core (pytest-xdist; at most 4, each with torch on one thread: tests/conftest.py), tests
# handed out as workers free up. Options after the script win: -n 0 runs in this one process (one test, --pdb).
# Bytecode is cached (git-ignored __pycache__) even where the environment says not to: pytest's rewritten tests and
# our type-checked modules then compile once, not in every worker of every run (~5 s a worker).
unset PYTHONDONTWRITEBYTECODE
exec "$ROOT/.venv/bin/python" -m pytest -n auto --maxprocesses 4 --dist worksteal "$@"
