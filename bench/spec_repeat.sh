#!/usr/bin/env bash
# Speculative decoding's acceptance check on a TinyLlama-1.1B-shape Q4_0 model (random
# weights, the Llama 2 vocabulary), 2 threads, default flags: pagoda serve with its default
# proposers (suffix,ngram) and with --spec-type none, one after the other, each answering
# `pagoda bench --workload repeat --turns 2` (a 64-token message sent twice, alone, greedy;
# 128-token answers): turn 1 is a fresh prompt, turn 2 the same request again. Prints each
# server's per-turn table (decode t/s is per request) and checks that both servers gave the
# same text to one request (curl, twice on the speculating server).
#   bench/spec_repeat.sh OUTDIR [THREADS] [JOBS]
set -euo pipefail
out="$1"; threads="${2:-2}"; jobs="${3:-4}"
root="$(cd "$(dirname "$0")/.." && pwd)"
pagoda="$root/build/release/pagoda"
model="$out/tinyllama-q4_0.gguf"
port=18491
mkdir -p "$out"
[ -f "$model" ] || "$pagoda" synth --shape tinyllama-1.1b --type q4_0 \
  --vocab-from "$root/../shared/models/ggml-vocab/ggml-vocab-llama-spm.gguf" -o "$model" >/dev/null
. "$root/bench/lib_server.sh"  # wait_ready
text() {
  curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "The old lighthouse keeper wrote in his log every night", "max_tokens": 64, "temperature": 0, "ignore_eos": true}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'
}
for spec in default none; do
  flags=(); [ "$spec" = none ] && flags=(--spec-type none)
  "$pagoda" serve -m "$model" -t "$threads" --port "$port" --parallel 1 --ctx-size 2048 --kv-cache-bytes 1GiB \
    --no-log-requests "${flags[@]}" >"$out/serve-$spec.log" 2>&1 &
  pid=$!
  wait_ready
  text >"$out/text-$spec-1.txt"
  text >"$out/text-$spec-2.txt"
  "$pagoda" bench --quiet --url "http://127.0.0.1:$port" -m "$model" --endpoint completions --workload repeat \
    --turns 2 --requests $((2 * jobs)) --input-len 64 --output-len 128 --timeout 600 --label "$spec" \
    --out "$out/$spec.json" | sed -n '/turn/,$p'
  curl -sf "http://127.0.0.1:$port/v1/cache/stats" | python3 -c 'import json,sys; s=json.load(sys.stdin)["speculation"]; print("  speculation:", {k: s[k] for k in ("types","draft_tokens","accepted_tokens","acceptance_rate","mean_accepted_length","step_fixed_ms","step_per_token_ms")})'
  kill -INT "$pid"; wait "$pid" || true
done
for f in "$out"/text-default-1.txt "$out"/text-default-2.txt; do
  cmp -s "$f" "$out/text-none-1.txt" && echo "same text: $f" || { echo "TEXT DIFFERS: $f" >&2; exit 1; }
done
