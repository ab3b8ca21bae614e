#!/usr/bin/env bash
# Speculative decoding against llama-server on the repeat workload (bench/spec_repeat.sh's
# model and workload): pagoda serve with its defaults, then llama-server with --spec-type
# none and each of its model-free types (ngram-simple, ngram-map-k, ngram-map-k4v,
# ngram-mod, ngram-cache), one server at a time on the same GGUF, 2 threads, 1 slot, each
# answering `pagoda bench --workload repeat --turns 2` on /v1/completions. Prints each
# server's per-turn decode tok/s (per request): turn 1 fresh, turn 2 the same request again.
#   bench/spec_peer.sh OUTDIR [THREADS] [JOBS] [LLAMA_SERVER]
# LLAMA_SERVER defaults to the peer's portable build (../shared/peer/build-peer.sh), with
# OMP_WAIT_POLICY=passive (its spinning threads stall on a shared 2-core machine).
set -euo pipefail
out="$1"; threads="${2:-2}"; jobs="${3:-4}"
llama="${4:-$HOME/.cache/pagoda-peer/portable/bin/llama-server}"
root="$(cd "$(dirname "$0")/.." && pwd)"
pagoda="$root/build/release/pagoda"
model="$out/tinyllama-q4_0.gguf"
port=18492
mkdir -p "$out"
[ -f "$model" ] || "$pagoda" synth --shape tinyllama-1.1b --type q4_0 \
  --vocab-from "$root/../shared/models/ggml-vocab/ggml-vocab-llama-spm.gguf" -o "$model" >/dev/null
. "$root/bench/lib_server.sh"  # wait_ready, start_server
run() {  # NAME, then the server command
  local name="$1"; shift
  start_server "$name" "$@"
  local pid=$server_pid
  "$pagoda" bench --quiet --url "http://127.0.0.1:$port" -m "$model" --endpoint completions --workload repeat \
    --turns 2 --requests $((2 * jobs)) --input-len 64 --output-len 128 --timeout 900 --label "$name" \
    --out "$out/peer-$name.json" >/dev/null
  kill -INT "$pid"; wait "$pid" || true
  python3 - "$out/peer-$name.json" "$name" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]["per_turn"]
print("%-22s fresh %6.1f t/s   repeat %6.1f t/s" % (sys.argv[2], s[0]["per_stream_tok_s"]["mean"], s[1]["per_stream_tok_s"]["mean"]))
PY
}
[ "${SKIP_PAGODA:-0}" = 1 ] || run pagoda "$pagoda" serve -m "$model" -t "$threads" --port "$port" --parallel 1 --ctx-size 2048 \
  --kv-cache-bytes 1GiB --no-log-requests
for t in ${TYPES:-none ngram-simple ngram-map-k ngram-map-k4v ngram-mod ngram-cache}; do
  run "llama-$t" env OMP_WAIT_POLICY=passive "$llama" -m "$model" -t "$threads" --port "$port" -np 1 -c 2048 \
    --spec-type "$t"
done
