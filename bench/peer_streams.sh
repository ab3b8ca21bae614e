#!/usr/bin/env bash
# Eight streams against llama-server: pagoda serve and the peer's llama-server (8 slots
# each, 2 threads) on the same TinyLlama-shape GGUF with a real vocabulary, each answering
# `pagoda bench` on /v1/completions with 1 and then 8 requests in flight (random prompts of
# ~64 tokens, 64 generated, ignore_eos). Prints per server and concurrency: the aggregate
# generation rate over the wall time (prefill included) and the decode-phase aggregate
# (the mean per-stream decode rate times the streams).
#   bench/peer_streams.sh OUTDIR [THREADS] [TYPE] [LLAMA_SERVER...]
# TYPE defaults to q4_0. LLAMA_SERVER defaults to the peer's portable and native builds
# (../shared/peer/build-peer.sh), run with OMP_WAIT_POLICY=passive (their spinning threads
# stall on a shared 2-core machine).
set -euo pipefail
out="$1"; threads="${2:-2}"; type="${3:-q4_0}"
shift $(( $# < 3 ? $# : 3 ))
peers=("$@")
[ ${#peers[@]} -gt 0 ] || peers=("$HOME/.cache/pagoda-peer/portable/bin/llama-server" "$HOME/.cache/pagoda-peer/native/bin/llama-server")
root="$(cd "$(dirname "$0")/.." && pwd)"
pagoda="$root/build/release/pagoda"
model="$out/tinyllama-$type.gguf"
port=18494
mkdir -p "$out"
[ -f "$model" ] || "$pagoda" synth --shape tinyllama-1.1b --type "$type" \
  --vocab-from "$root/../shared/models/ggml-vocab/ggml-vocab-llama-spm.gguf" -o "$model" >/dev/null
. "$root/bench/lib_server.sh"  # wait_ready, start_server
# The random model's text is random tokens, and a run of byte tokens (<0x00>..<0xFF>, ids
# 3-258 of this vocabulary) is often invalid UTF-8: llama-server b10587 then ends the
# stream with "The model produced output that does not match the expected Content-only
# format" (4-6 of its 16 requests here), which frees its slots early and flatters its
# figures. Both servers are asked not to sample those 256 tokens.
no_bytes=$(python3 -c 'import json; print(json.dumps({"logit_bias": {str(i): -100 for i in range(3, 259)}}))')
run() {  # NAME, then the server command
  local name="$1"; shift
  start_server "$name" "$@"
  local pid=$server_pid
  # One warm-up request: the first forward pages the weights in.
  "$pagoda" bench --quiet --url "http://127.0.0.1:$port" --endpoint completions --workload random --requests 1 --input-len 16 \
    --output-len 4 --timeout 900 >/dev/null
  for c in 1 8; do
    "$pagoda" bench --quiet --url "http://127.0.0.1:$port" -m "$model" --endpoint completions --workload random \
      --concurrency "$c" --requests $((2 * c)) --input-len 64 --output-len 64 --seed "$c" --timeout 900 \
      --label "$name-c$c" --out "$out/$name-c$c.json" --extra-body "$no_bytes" >/dev/null
    python3 - "$out/$name-c$c.json" "$name" "$c" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
c = int(sys.argv[3])
print("%-16s %d in flight: %6.1f gen tok/s over the wall, decode %6.1f tok/s (%.1f a stream), %d of %d requests ok" %
      (sys.argv[2], c, s["generation_tok_s"], s["per_stream_tok_s"]["mean"] * c, s["per_stream_tok_s"]["mean"],
       s["requests_ok"], s["requests_sent"]))
PY
  done
  kill -INT "$pid"; wait "$pid" || true
}
run pagoda "$pagoda" serve -m "$model" -t "$threads" --port "$port" --parallel 8 --ctx-size 8192 \
  --kv-cache-bytes 1GiB --no-log-requests
for llama in "${peers[@]}"; do
  name="llama-$(basename "$(dirname "$(dirname "$llama")")")"
  run "$name" env OMP_WAIT_POLICY=passive LD_LIBRARY_PATH="$(dirname "$llama")" "$llama" -m "$model" -t "$threads" \
    --port "$port" -np 8 -c 8192 --no-warmup
done
