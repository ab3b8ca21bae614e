#!/usr/bin/env bash
# Installs what the web UI's browser test (tests/webui) needs: Debian's Chromium (the test
# drives the system browser; nothing is downloaded at test time) and the npm package
# playwright-core from tests/webui/package-lock.json (`npm ci` into tests/webui/node_modules).
# Idempotent and quiet: when both are there (and node_modules matches the lock file, by a
# stamp of its sha256) it prints nothing and changes nothing. Node.js itself is installed by
# scripts/install-npm-deps.sh, which runs first.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed"; then
  echo "install-webui-test-deps: installing chromium" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
cd tests/webui
stamp=node_modules/.pagoda-package-lock.sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f node_modules/playwright-core/package.json ]; then
  exit 0
fi
echo "install-webui-test-deps: npm ci in tests/webui" >&2
# playwright-core downloads no browser on install (only the `playwright` package does).
npm ci --no-audit --no-fund --loglevel=error >/dev/null
echo "$want" >"$stamp"
