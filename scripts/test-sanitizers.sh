#!/usr/bin/env bash
# Builds the sanitizer presets and runs their test sets (scripts/test.sh calls it after the
# release suite; `scripts/test-sanitizers.sh asan` runs one). Each preset builds only the target
# tests_<preset> (the pagoda binary and the test executables labelled <preset> in
# tests/CMakeLists.txt), then runs `ctest -L <preset>`:
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (UB aborts: -fno-sanitize-recover):
#         every unit test, the fuzz tests, serve_e2e and structured_output_e2e
#   tsan  ThreadSanitizer: tests/common, tests/engine, tests/server/http_*, tests/loadgen/runner
# Extra ctest arguments after `--`, e.g. `scripts/test-sanitizers.sh asan -- -R Jinja`.
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
for preset in "${presets[@]}"; do
  cmake --preset "$preset" >/dev/null
  phase "$preset build" cmake --build --preset "$preset" --target "tests_$preset"
  phase "$preset suite" ctest --preset "$preset" -L "$preset" "$@"
done
