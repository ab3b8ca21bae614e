#!/usr/bin/env bash
# Multi-turn chat on a hybrid (Gated DeltaNet) model: pagoda serve and llama-server on the
# same GGUF, one after the other, with the same `pagoda bench` workload (issue 33's check).
#   bench/hybrid_multiturn.sh OUTDIR [THREADS] [LLAMA_SERVER]
# The model: `pagoda synth --arch qwen35 --dim 512 --layers 8 --type q8_0` with Qwen3's
# vocabulary (chatml), written to OUTDIR/qwen35-d512.gguf once. The workload: 2 conversations
# x 4 turns, each opening with its own 600-token system prompt, 40-token user messages and
# 64-token answers (ignore_eos): ~1k tokens by turn 4. Both servers: chatml, 2 slots, 2
# threads. pagoda is measured on /v1/chat/completions (its answers fed back as their own ids:
# src/server/answer_tokens.h) and, side by side with llama-server, on /v1/completions with the
# conversation rendered as text by the bench (llama-server's chat route ends a stream with an
# error when its output parser meets a random model's text, --skip-chat-parsing or not).
# Writes OUTDIR/{pagoda-chat,pagoda,llama}.json, the side-by-side table (--compare) and
# OUTDIR/ttft.svg; the servers use port 18490. LLAMA_SERVER defaults to the peer's portable
# build (../shared/peer/build-peer.sh; the native AMX build crashed loading this model here),
# with OMP_WAIT_POLICY=passive (its busy-waiting threads stall on a shared 2-core machine).
set -euo pipefail
out="$1"; threads="${2:-2}"
llama="${3:-$HOME/.cache/pagoda-peer/portable/bin/llama-server}"
root="$(cd "$(dirname "$0")/.." && pwd)"
pagoda="$root/build/release/pagoda"
model="$out/qwen35-d512.gguf"
port=18490
mkdir -p "$out"
[ -f "$model" ] || "$pagoda" synth --arch qwen35 --dim 512 --layers 8 --type q8_0 \
  --vocab-from "$root/../shared/models/qwen3-tokenizer" -o "$model" >/dev/null
. "$root/bench/lib_server.sh"  # wait_ready
stop() { kill -INT "$server_pid"; wait "$server_pid" || true; }
bench() {
  "$pagoda" bench --quiet --url "http://127.0.0.1:$port" -m "$model" --seed "${SEED:-1}" --workload multi-turn \
    --conversations 2 --turns 4 --system-len 600 --input-len 40 --output-len 64 --timeout 600 "$@"
}

"$pagoda" serve -m "$model" -t "$threads" --port "$port" --parallel 2 --ctx-size 4096 --kv-cache-bytes 1GiB \
  --chat-template chatml --no-log-requests 2>>"$out/pagoda.log" &
server_pid=$!
wait_ready
bench --label pagoda-chat --out "$out/pagoda-chat.json" | tee "$out/pagoda-chat.txt"
curl -sf -X POST "http://127.0.0.1:$port/v1/cache/reset" >/dev/null
bench --endpoint completions --label pagoda --out "$out/pagoda.json" | tee "$out/pagoda.txt"
curl -sf "http://127.0.0.1:$port/v1/cache/stats" > "$out/pagoda-cache-stats.json"
stop

OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} "$llama" -m "$model" -t "$threads" --port "$port" -np 2 -c 8192 --chat-template chatml 2>>"$out/llama.log" >&2 &
server_pid=$!
wait_ready
bench --endpoint completions --label llama-server --out "$out/llama.json" | tee "$out/llama.txt"
stop

"$pagoda" bench --compare "$out/llama.json" "$out/pagoda.json" --plot "$out/ttft.svg" | tee "$out/compare.txt"
