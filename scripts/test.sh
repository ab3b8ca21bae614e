#!/usr/bin/env bash
# Installs dependencies, builds the release preset and runs the whole test suite
# (unit, model, e2e labels). Extra arguments go to ctest, e.g. `-L unit`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/install-npm-deps.sh  # tests/sdk's OpenAI SDK (npm ci into tests/sdk/node_modules)
cmake --preset release >/dev/null
cmake --build --preset release
ctest --preset release "$@"
