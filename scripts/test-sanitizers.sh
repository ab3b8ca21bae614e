#!/usr/bin/env bash
# Builds the sanitizer presets and runs their test sets (scripts/test.sh calls it after the
# release suite; `scripts/test-sanitizers.sh asan` runs one). Each preset builds only the target
# tests_<preset> (the pagoda binary and the test executables labelled <preset> in
# tests/CMakeLists.txt), then runs `ctest -L <preset>`:
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (UB aborts: -fno-sanitize-recover):
#         every unit test, the fuzz tests and serve_e2e
#   tsan  ThreadSanitizer: tests/common, tests/engine, tests/http/*, tests/loadgen/runner
# Extra ctest arguments after `--`, e.g. `scripts/test-sanitizers.sh asan -- -R Jinja`.
# Time budget: PAGODA_SAN_DEADLINE (epoch seconds; scripts/test.sh sets it from
# PAGODA_CI_BUDGET_S, default 80 minutes after it started, so CI's 90 stay out of reach).
# Each phase runs under `timeout` with what is left; a phase the deadline cuts, and the
# phases after it, are reported as not run ("cut by the time budget") and do not fail the
# run: a cold ccache makes the sanitizer builds alone ~45 CPU-minutes on 2 cores, and a
# CI that runs out of time lands nothing. A sanitizer finding or a failing test still fails.
set -euo pipefail
cd "$(dirname "$0")/.."
presets=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  case "$1" in
    asan|tsan) presets+=("$1") ;;
    *) echo "test-sanitizers: unknown preset '$1' (asan, tsan)" >&2; exit 2 ;;
  esac
  shift
done
[ $# -gt 0 ] && shift  # the --
[ ${#presets[@]} -eq 0 ] && presets=(asan tsan)
PHASE_PREFIX=test-sanitizers
. scripts/phase.sh
deadline="${PAGODA_SAN_DEADLINE:-0}"
# bounded NAME COMMAND...: the phase under `timeout` until the deadline (none when 0).
# Returns 3 when the deadline cut it (or left no time to start it).
bounded() {
  local name="$1" left rc=0
  shift
  if [ "$deadline" -eq 0 ]; then
    phase "$name" "$@"
    return
  fi
  left=$((deadline - $(date +%s)))
  if [ "$left" -lt 60 ]; then
    echo "test-sanitizers: $name NOT RUN: cut by the time budget (PAGODA_SAN_DEADLINE)" >&2
    return 3
  fi
  phase "$name" timeout --kill-after=30 "$left" "$@" || rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "test-sanitizers: $name CUT after ${left} s by the time budget (PAGODA_SAN_DEADLINE)" >&2
    return 3
  fi
  return "$rc"
}
for preset in "${presets[@]}"; do
  cmake --preset "$preset" >/dev/null
  rc=0
  bounded "$preset build" cmake --build --preset "$preset" --target "tests_$preset" || rc=$?
  [ "$rc" -eq 0 ] && { bounded "$preset suite" ctest --preset "$preset" -L "$preset" "$@" || rc=$?; }
  if [ "$rc" -eq 3 ]; then
    echo "test-sanitizers: the remaining sanitizer phases are not run (time budget)" >&2
    exit 0
  fi
  [ "$rc" -eq 0 ] || exit "$rc"
done
