#!/usr/bin/env bash
# The AVX2 levels side by side on whatever CPU this is: pagoda capped at AVX2
# (PAGODA_ISA=avx2) against llama.cpp b10587 built with AVX2 / FMA / F16C / BMI2 only (no
# AVX-512, no AMX), ROUNDS alternating rounds, prompt (pp512) and generation (tg64). On a
# CPU with AVX-512 this stands in for an AVX2-only machine (Zen 3): the same instructions,
# not the same core, memory or clock, so the ratios are what it shows, not the speeds.
#
#   bench/peer_table_avx2.sh THREADS ROUNDS MODEL.gguf...
#
# The AVX2 peer is built once (about 10 minutes on 2 cores) from the source tree that
# ../shared/peer/build-peer.sh unpacked, into $PAGODA_PEER_DIR/avx2.
set -uo pipefail
cd "$(dirname "$0")/.."
threads=$1 rounds=$2
shift 2
P=build/release/pagoda
D=${PAGODA_PEER_DIR:-$HOME/.cache/pagoda-peer}
if [ ! -x "$D/avx2/bin/llama-bench" ]; then
  [ -f "$D/llama.cpp-b10587/CMakeLists.txt" ] || { echo "run ../shared/peer/build-peer.sh first" >&2; exit 1; }
  cmake -S "$D/llama.cpp-b10587" -B "$D/avx2" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
    -DGGML_F16C=ON -DGGML_BMI2=ON >"$D/avx2.log" 2>&1 &&
    cmake --build "$D/avx2" -j"$(nproc)" --target llama-bench >>"$D/avx2.log" 2>&1 || { echo "AVX2 peer build failed: $D/avx2.log" >&2; exit 1; }
fi
for round in $(seq "$rounds"); do
  for f in "$@"; do
    echo "== $f pagoda PAGODA_ISA=avx2 round $round"
    PAGODA_ISA=avx2 $P bench-model -m "$f" -p 512 -n 64 -r 2 -t "$threads" 2>&1 | grep -E "prompt processing|generation|roofline"
    echo "== $f llama.cpp avx2 round $round"
    LD_LIBRARY_PATH=$D/avx2/bin timeout 900 "$D/avx2/bin/llama-bench" -m "$f" -t "$threads" -p 512 -n 64 -r 2 2>&1 |
      grep -E "pp512|tg64" || echo "(failed)"
  done
done
