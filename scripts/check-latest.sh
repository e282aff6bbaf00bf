#!/usr/bin/env bash
# For maintainers: would the newest releases of our dependencies still compute the same numbers?
# Builds a separate environment (.venv-latest) with the newest release of every dependency, pyproject.toml's upper
# bounds lifted, and runs the fast-path equality tests there (each fast path against its plain path, on tiny models
# of every family) with the version guard relaxed. It prints the versions that differ from requirements.lock.
# A pass means the lock can be raised (docs/dependencies.md); a failure names the fast path a release broke.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
VENV="$ROOT/.venv-latest"
TORCH_SPEC="${MATHCIRCUITS_TORCH_SPEC:-torch==2.13.0}"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
"${PIP[@]}" "$TORCH_SPEC" ${MATHCIRCUITS_TORCH_INDEX:+--index-url "$MATHCIRCUITS_TORCH_INDEX"}
# every requirement of pyproject.toml (with the test and export extras) without its upper bound
"$VENV/bin/python" - > "$VENV/unbounded.txt" <<'PYEOF'
import re, tomllib
proj = tomllib.load(open("pyproject.toml", "rb"))["project"]
reqs = proj["dependencies"] + proj["optional-dependencies"]["test"] + proj["optional-dependencies"]["export"]
for r in reqs:
    name = re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0]
    if name != "torch":
        print(name)
PYEOF
"${PIP[@]}" --upgrade -r "$VENV/unbounded.txt"
"${PIP[@]}" --no-deps -e .
"${PIP[@]}" --no-deps -r requirements-data.txt
echo "[check-latest] versions that differ from requirements.lock:"
"$VENV/bin/python" -m pip freeze --exclude-editable --disable-pip-version-check | tr 'A-Z_' 'a-z-' | sort > "$VENV/freeze.txt"
grep -E '^[a-z0-9]' requirements.lock | sed 's/ .*//' | tr 'A-Z_' 'a-z-' | sort | comm -13 - "$VENV/freeze.txt" | grep -v '^torch==' || echo "  (none)"
export MATHCIRCUITS_ALLOW_UNTESTED_VERSIONS=1
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider -m "not slow" "$@" \
  tests/test_fast_paths.py tests/test_families.py tests/test_generation_cache.py tests/test_integrity.py
