#!/usr/bin/env bash
# Installs dependencies, builds the release preset and runs the whole test suite (unit, model,
# e2e labels), then, when called without arguments, the sanitizer suites
# (scripts/test-sanitizers.sh: unit / server / fuzz tests under ASan + UBSan, engine and thread
# tests under TSan). Extra arguments go to ctest and run the release suite only, e.g. `-L unit`.
# PAGODA_SANITIZERS=off skips the sanitizer suites; PAGODA_SANITIZERS=asan runs just that one.
# On a CPU without AVX-512 (and with PAGODA_EMU=on anywhere; off skips it) it also builds the
# `emu` preset, the AVX-512 kernels through SIMDe, and runs the kernel tests there: measured
# on 2 loaded Xeon cores, 52-140 CPU-s to build (warm / cold ccache) and 23 CPU-s to test.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache across checkouts: with base_dir the absolute paths under this checkout are hashed as
# relative ones, and without hash_dir the build directory (in -g's DW_AT_comp_dir) is left out
# of the hash, so a fresh clone elsewhere (CI) reuses the objects of this one. The cost: an
# object's debug info names the build directory it was first compiled in. Test executables
# still miss (their -D PAGODA_SOURCE_DIR / PAGODA_BINARY are absolute paths).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
# The sanitizer phases stop at this deadline (see scripts/test-sanitizers.sh).
export PAGODA_SAN_DEADLINE="${PAGODA_SAN_DEADLINE:-$(($(date +%s) + ${PAGODA_CI_BUDGET_S:-4800}))}"
scripts/install-deps.sh
scripts/install-npm-deps.sh  # tests/sdk's OpenAI SDK (npm ci into tests/sdk/node_modules)
scripts/install-webui-test-deps.sh  # tests/webui: Debian's chromium and playwright-core (npm ci)
PHASE_PREFIX=test.sh
. scripts/phase.sh
cmake --preset release >/dev/null
phase "release build" cmake --build --preset release
phase "release suite" ctest --preset release "$@"
emu="${PAGODA_EMU:-auto}"
[ "$emu" = auto ] && { grep -qw avx512f /proc/cpuinfo && emu=off || emu=on; }
if [ $# -eq 0 ] && [ "$emu" = on ]; then
  cmake --preset emu >/dev/null
  phase "emulated AVX-512 build" cmake --build --preset emu
  phase "emulated AVX-512 kernel tests" ctest --preset emu
fi
if [ $# -eq 0 ] && [ "${PAGODA_SANITIZERS:-asan tsan}" != off ]; then
  scripts/test-sanitizers.sh ${PAGODA_SANITIZERS:-asan tsan}
fi
