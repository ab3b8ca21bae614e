#!/usr/bin/env bash
# pagoda against the llama.cpp peer, side by side: for each GGUF, pagoda bench-model, then
# llama-bench from the peer's native build (generation only: on CPUs with AMX its prompt
# processing crashes) and its portable build, alternating, same thread count.
#
#   bench/peer.sh THREADS MODEL.gguf...        (peer built by ../shared/peer/build-peer.sh)
#
# Prints the raw lines; the side-by-side tables in docs/performance.md are read from such lines.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=$1
shift
P=build/release/pagoda
D=${PAGODA_PEER_DIR:-$HOME/.cache/pagoda-peer}
for f in "$@"; do
  echo "== $f pagoda"
  $P bench-model -m "$f" -p 512 -n 64 -r 2 -t "$threads" 2>&1 | grep -E "prompt processing|generation|roofline"
  echo "== $f llama.cpp native"
  LD_LIBRARY_PATH=$D/native/bin timeout 300 "$D/native/bin/llama-bench" -m "$f" -t "$threads" -p 0 -n 64 -r 2 2>&1 |
    grep -E "tg64" || echo "(failed)"
  echo "== $f llama.cpp portable"
  LD_LIBRARY_PATH=$D/portable/bin timeout 400 "$D/portable/bin/llama-bench" -m "$f" -t "$threads" -p 512 -n 64 -r 2 2>&1 |
    grep -E "pp512|tg64" || echo "(failed)"
done
