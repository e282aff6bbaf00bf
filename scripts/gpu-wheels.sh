#!/usr/bin/env bash
# Prepare what the device check (scripts/gpu-check.sh) carries to the GPU machine, here, where pip works:
#   .whl/            the wheels of the packages the GPU image lacks or holds in another version, at the versions of
#                    requirements.lock (pure Python, Python 3.12): TransformerLens and what it imports, datasets,
#                    plotly and circuitsvis (the pipeline's figures and report), peft (compat.SUPPORTED checks its
#                    version);
#   .gpu-tokenizer/  the embedded model's tokenizer files (SmolLM2, ~3.5 MB; no weights), so prompts tokenize as the
#                    real model's do (digits one token each: ~2.5 answer positions on 1-99 addition).
# Both are ignored by git (.gitignore): name them in the device call's carry. Prints the total size that travels
# (the limit is 64 MiB with the tree). The GPU image already holds torch 2.11, transformers 5.17 (inside
# compat.SUPPORTED; TransformerLens 4.3.0 needs >= 5.9), accelerate, pandas, pyarrow, jaxtyping, einops, ...
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
NAMES=(transformer-lens datasets dill multiprocess plotly circuitsvis importlib-metadata lazy-importer peft beartype typeguard
  fancy-einsum)
rm -rf .whl && mkdir -p .whl
for name in "${NAMES[@]}"; do
  spec="$(grep -iE "^${name}==" requirements.lock | cut -d' ' -f1)"
  [ -n "$spec" ] || { echo "error: $name is not in requirements.lock. Fix: update NAMES in $0" >&2; exit 2; }
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d .whl "$spec"
done
TOKDIR="$("$PYTHON" -c 'from mathcircuits.models.embedded import embedded_model_dir; print(embedded_model_dir())')"
rm -rf .gpu-tokenizer && mkdir -p .gpu-tokenizer
for f in tokenizer.json tokenizer_config.json special_tokens_map.json chat_template.jinja; do
  [ -f "$TOKDIR/$f" ] && cp "$TOKDIR/$f" .gpu-tokenizer/
done
ls -1 .whl
tree_bytes="$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)"
carry_bytes="$(du -cb .whl .gpu-tokenizer | tail -1 | cut -f1)"
echo "carry: .whl $(du -sh .whl | cut -f1), .gpu-tokenizer $(du -sh .gpu-tokenizer | cut -f1); with the tracked tree" \
  "$(( (tree_bytes + carry_bytes) / 1048576 )) MiB of the 64 MiB limit"
