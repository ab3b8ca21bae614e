#!/usr/bin/env bash
# The serving numbers in docs/performance.md: `pagoda bench` against `pagoda serve` on one model.
#   bench/serving.sh MODEL OUTDIR [THREADS]
# 1. multi-turn chat (2 conversations x 4 turns, 100-token user messages, 16-token answers),
#    prefix cache on and then off: TTFT per turn, side by side (--compare) and as one SVG;
# 2. throughput vs concurrency (random workload, 2 requests per concurrent stream, at least
#    4), prompt-heavy (~128-token prompts, 32 generated tokens) and decode-heavy (~32-token
#    prompts, 96 generated), a fresh seed per level and the prefix cache reset between
#    levels, so no level reuses another's prompts.
# Each server gets one warm-up request before it is measured.
# Writes OUTDIR/*.json, OUTDIR/*.svg and OUTDIR/summary.txt; the servers use port 18480.
set -euo pipefail
model="$1"; out="$2"; threads="${3:-2}"
root="$(cd "$(dirname "$0")/.." && pwd)"
pagoda="$root/build/release/pagoda"
port=18480
mkdir -p "$out"
serve() {  # serve CACHE(on|off)
  "$pagoda" serve -m "$model" -t "$threads" --port "$port" --parallel 8 --ctx-size 2048 \
    --kv-cache-bytes 1GiB --prompt-cache "$1" --no-log-requests 2>>"$out/serve.log" &
  server_pid=$!
  for _ in $(seq 1 600); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
      # Warm-up: the first forward pages the weights in from the mmap'd file.
      curl -sf "http://127.0.0.1:$port/v1/completions" -d '{"prompt":"warm up","max_tokens":2}' >/dev/null
      curl -sf -X POST "http://127.0.0.1:$port/v1/cache/reset" >/dev/null
      return 0
    fi
    sleep 0.1
  done
  echo "server did not become ready" >&2; exit 1
}
stop() { kill -INT "$server_pid"; wait "$server_pid" || true; }
bench() { "$pagoda" bench --quiet --url "http://127.0.0.1:$port" -m "$model" "$@"; }

: > "$out/summary.txt"
for cache in on off; do
  serve "$cache"
  bench --seed 1 --workload multi-turn --conversations 2 --turns 4 --input-len 100 --output-len 16 \
    --label "cache-$cache" --out "$out/multi-turn-cache-$cache.json" | tee -a "$out/summary.txt"
  stop
done
"$pagoda" bench --compare "$out/multi-turn-cache-off.json" "$out/multi-turn-cache-on.json" \
  --plot "$out/multi-turn-ttft.svg" | tee -a "$out/summary.txt"

serve on
for shape in "128 32 prompt-heavy" "32 96 decode-heavy"; do
  set -- $shape
  for c in 1 2 4 8; do
    n=$((2 * c)); [ "$n" -lt 4 ] && n=4
    curl -sf -X POST "http://127.0.0.1:$port/v1/cache/reset" >/dev/null
    bench --seed "$((100 + c))" --workload random --concurrency "$c" --requests "$n" --input-len "$1" \
      --output-len "$2" --label "$3-c$c" --out "$out/$3-c$c.json" | tee -a "$out/summary.txt"
  done
done
stop
