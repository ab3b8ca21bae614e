#!/usr/bin/env bash
# Installs dependencies, builds pagoda and serves the default model over the
# OpenAI-compatible HTTP API on http://127.0.0.1:8080 (Ctrl-C stops it).
# The default model is ../shared/models/stories260K/stories260K.gguf; PAGODA_MODEL
# or a first argument that is not a flag (a GGUF file, a Hugging Face directory, or
# hf://OWNER/REPO[:QUANT] from the Hugging Face Hub, downloaded on first use) overrides it.
# Further arguments go to `pagoda serve` (e.g. --port 9000 --api-key KEY).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target pagoda
model="${PAGODA_MODEL:-../shared/models/stories260K/stories260K.gguf}"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then  # a first argument that is not a flag is the model
  model="$1"
  shift
fi
if [ "${model#hf://}" = "$model" ] && [ ! -e "$model" ]; then  # hf://... is fetched by pagoda
  echo "run-default: no model at $model (pass a GGUF file, model directory or hf://OWNER/REPO[:QUANT], or set PAGODA_MODEL)" >&2
  exit 1
fi
exec build/release/pagoda serve -m "$model" "$@"
