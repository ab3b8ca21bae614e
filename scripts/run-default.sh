#!/usr/bin/env bash
# Installs dependencies, builds pagoda and generates text with the default model.
# The default model is ../shared/models/stories260K/stories260K.gguf; PAGODA_MODEL
# or the first argument overrides it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target pagoda
model="${1:-${PAGODA_MODEL:-../shared/models/stories260K/stories260K.gguf}}"
if [ ! -f "$model" ]; then
  echo "run-default: no model at $model (pass a GGUF path or set PAGODA_MODEL)" >&2
  exit 1
fi
exec build/release/pagoda generate -m "$model" -p "Once upon a time" -n 60 --temp 0
