#!/usr/bin/env bash
# Recompile requirements.lock with uv from pyproject.toml's ranges: the newest releases inside them (or, with
# --from-venv, exactly the versions installed in .venv, i.e. the ones the suite just passed with).
# torch is left out of the lock (scripts/setup.sh installs the build that fits the machine first), but its own
# dependencies are resolved from the CPU build (MATHCIRCUITS_TORCH_WHEELS, default /opt/wheels, or the index of
# MATHCIRCUITS_TORCH_INDEX), so no CUDA packages enter the lock. docs/dependencies.md gives the whole procedure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
UV="$(command -v uv || true)"
if [ -z "$UV" ]; then
  [ -x .venv/bin/uv ] || .venv/bin/python -m pip install -q --disable-pip-version-check uv
  UV=.venv/bin/uv
fi
# the venv's exact Python: "3.11" alone admits 3.11.0, which some locked packages (soupsieve 4.1) refuse
PY_VERSION="$(.venv/bin/python -c 'import platform; print(platform.python_version())')"
TORCH_SPEC="${MATHCIRCUITS_TORCH_SPEC:-torch==2.13.0}"
CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
if [ "${1:-}" = "--from-venv" ]; then
  .venv/bin/python -m pip freeze --exclude-editable --disable-pip-version-check | grep -v '^-e ' > "$CONSTRAINTS"
else
  echo "$TORCH_SPEC" > "$CONSTRAINTS"
fi
SOURCES=(--find-links "${MATHCIRCUITS_TORCH_WHEELS:-/opt/wheels}")
[ -n "${MATHCIRCUITS_TORCH_INDEX:-}" ] && SOURCES+=(--extra-index-url "$MATHCIRCUITS_TORCH_INDEX" --index-strategy unsafe-best-match)
"$UV" pip compile pyproject.toml --extra test --extra export --extra notebooks -c "$CONSTRAINTS" "${SOURCES[@]}" \
  --no-emit-package torch --python-version "$PY_VERSION" --python-platform x86_64-manylinux_2_28 \
  --no-header --annotation-style line -q -o requirements.lock.new
{
  echo "# The exact versions the test suite passed with (bash scripts/lock.sh; see docs/dependencies.md)."
  echo "# torch is installed first by scripts/setup.sh ($TORCH_SPEC, the build that fits the machine)."
  sed -E 's/, -c [^ ,]+//; s/# via -c [^ ,]+, /# via /; s/ +# via -c [^ ,]+$//' requirements.lock.new
} > requirements.lock
rm requirements.lock.new
echo "[lock] wrote requirements.lock ($(grep -c '==' requirements.lock) packages)"
