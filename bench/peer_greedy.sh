#!/usr/bin/env bash
# Does llama.cpp read pagoda's GGUFs as pagoda does, architecture by architecture? For each
# ARCH: `pagoda synth --arch ARCH --shape tiny --type f32` with stories260K's vocabulary,
# then tests/model/peer_greedy.sh on it (pagoda generate and the peer's llama-completion,
# greedy, the same text or a FAIL line). Exits 1 when any differs.
#
#   bench/peer_greedy.sh [ARCH...]      (default: qwen35; peer from ../shared/peer/build-peer.sh,
#                                        its portable build unless PAGODA_PEER_BIN says otherwise)
#   SEEDS="1 2 3" bench/peer_greedy.sh ... : one file per weight seed (default 1).
# A random model's top two logits are sometimes within 1e-4 of each other: where the texts
# part on such a near-tie, it is rounding order, not a misread layout; more seeds tell.
set -uo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
files=()
for arch in "${@:-qwen35}"; do
  for seed in ${SEEDS:-1}; do
    f="$tmp/$arch-seed$seed.gguf"
    build/release/pagoda synth --arch "$arch" --shape tiny --type f32 --seed "$seed" \
      --vocab-from ../shared/models/stories260K/stories260K.gguf -o "$f" >/dev/null 2>&1 || { echo "FAIL $arch: synth"; exit 1; }
    files+=("$f")
  done
done
PAGODA_PEER_BIN=${PAGODA_PEER_BIN:-$HOME/.cache/pagoda-peer/portable/bin} tests/model/peer_greedy.sh "${files[@]}"
