#!/usr/bin/env bash
# docs/performance.md's two-thread side-by-side table: for each GGUF, pagoda bench-model (prompt and
# generation; also PAGODA_ISA=avx512 for the AMX comparison), llama-bench's native build
# (generation only: on CPUs with AMX its prompt processing crashes) and its portable build,
# ROUNDS alternating rounds; then the 4k-context run of the first GGUF and eight streams.
#
#   bench/peer_table.sh THREADS ROUNDS MODEL.gguf...   (peer from ../shared/peer/build-peer.sh)
#
# Files as in docs/performance.md: pagoda synth --shape tinyllama-1.1b --type q4_0|q8_0|q4_k|f16|bf16.
# Prints the raw lines; the table is read from them.
set -uo pipefail
cd "$(dirname "$0")/.."
threads=$1 rounds=$2
shift 2
P=build/release/pagoda
D=${PAGODA_PEER_DIR:-$HOME/.cache/pagoda-peer}
peer() { local build=$1; shift; LD_LIBRARY_PATH=$D/$build/bin timeout 900 "$D/$build/bin/llama-bench" "$@" 2>&1; }
for round in $(seq "$rounds"); do
  for f in "$@"; do
    echo "== $f pagoda round $round"
    $P bench-model -m "$f" -p 512 -n 64 -r 2 -t "$threads" 2>&1 | grep -E "prompt processing|generation|roofline|resident"
    echo "== $f pagoda PAGODA_ISA=avx512 round $round"
    PAGODA_ISA=avx512 $P bench-model -m "$f" -p 512 -n 0 -r 2 -t "$threads" 2>&1 | grep -E "prompt processing"
    echo "== $f llama.cpp native round $round"
    peer native -m "$f" -t "$threads" -p 0 -n 64 -r 2 | grep -E "tg64" || echo "(failed)"
    echo "== $f llama.cpp portable round $round"
    peer portable -m "$f" -t "$threads" -p 512 -n 64 -r 2 | grep -E "pp512|tg64" || echo "(failed)"
  done
done
echo "== $1 at a 4096-token context"
$P bench-model -m "$1" -p 512 -n 32 -d 4096 -r 1 -t "$threads" 2>&1 | grep -E "prompt processing|generation|roofline"
peer portable -m "$1" -t "$threads" -p 512 -n 32 -d 4096 -r 1 | grep -E "pp512|tg32" || echo "(failed)"
peer native -m "$1" -t "$threads" -p 0 -n 32 -d 4096 -r 1 | grep -E "tg32" || echo "(failed)"
echo "== $1 eight streams"
$P bench-engine -m "$1" --streams 1,8 -p 64 -n 32 -t "$threads" 2>&1 | tail -3
