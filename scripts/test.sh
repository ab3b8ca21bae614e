#!/usr/bin/env bash
# The test command. Installs dependencies, builds the release preset and runs the whole
# release suite (unit, model, e2e labels); on a CPU without AVX-512 (or with PAGODA_EMU=on;
# off skips it) also the `emu` preset's kernel tests (the AVX-512 kernels through SIMDe:
# measured on 2 loaded Xeon cores, 52-140 CPU-s to build, warm / cold ccache, 23 CPU-s to test).
#   scripts/test.sh            the release suite (what a newcomer runs)
#   scripts/test.sh --all      and then the sanitizer sets (scripts/test-sanitizers.sh: unit /
#                              server / fuzz tests under ASan + UBSan, engine and thread tests
#                              under TSan); what .ci/run runs
#   scripts/test.sh -L unit    extra arguments go to ctest (the release suite only)
# PAGODA_SANITIZERS=asan (or tsan) with --all runs just that set. Skipped tests are counted
# at the end, with the reason when ../shared (the golden models) is missing: nothing is
# skipped silently.
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
all=0
if [ "${1:-}" = --all ]; then
  all=1
  shift
fi
PHASE_PREFIX=test.sh
. scripts/phase.sh
cmake --preset release >/dev/null
phase "release build" cmake --build --preset release
suite_log="$(mktemp)"
trap 'rm -f "$suite_log"' EXIT
rc=0
phase "release suite" ctest --preset release --output-log "$suite_log" "$@" || rc=$?
skipped=$(grep -c '(Skipped)$' "$suite_log" || true)
if [ "$skipped" -gt 0 ]; then
  echo "test.sh: $skipped tests skipped (listed above under 'The following tests did not run')" >&2
  [ -d ../shared/models ] || echo "test.sh: ../shared/models is missing: the golden-model tests skip without it" >&2
fi
[ "$rc" -eq 0 ] || exit "$rc"
emu="${PAGODA_EMU:-auto}"
[ "$emu" = auto ] && { grep -qw avx512f /proc/cpuinfo && emu=off || emu=on; }
if [ $# -eq 0 ] && [ "$emu" = on ]; then
  cmake --preset emu >/dev/null
  phase "emulated AVX-512 build" cmake --build --preset emu
  phase "emulated AVX-512 kernel tests" ctest --preset emu
fi
if [ "$all" -eq 1 ] && [ $# -eq 0 ] && [ "${PAGODA_SANITIZERS:-asan tsan}" != off ]; then
  scripts/test-sanitizers.sh ${PAGODA_SANITIZERS:-asan tsan}
fi
