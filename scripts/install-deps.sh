#!/usr/bin/env bash
# Installs pagoda's build and test dependencies from Debian packages.
# Idempotent: when everything is present it prints nothing and changes nothing.
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache pkg-config
  nlohmann-json3-dev libcli11-dev libpcre2-dev libssl-dev libboost-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libsimde-dev
  libpng-dev libjpeg62-turbo-dev libwebp-dev
  python3 python3-numpy python3-jinja2 python3-jsonschema
  haproxy
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
