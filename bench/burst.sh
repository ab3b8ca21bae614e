#!/usr/bin/env bash
# A burst of requests sharing one document, sent at once: time and cached tokens.
#   bench/burst.sh MODEL OUTDIR [THREADS] [PAGODA_BIN...]
# For each burst size (8, 32) and each executable given (default: this checkout's
# build/release/pagoda), starts `pagoda serve --parallel 8`, warms it up, and runs
# `pagoda bench --workload shared-prefix --concurrency N --requests N --prefix-len 1700`
# (short distinct questions after one ~1.7k-token system prompt, 16 generated tokens).
# Executables alternate per burst size, so two builds (before / after) meet the same
# minutes of machine load. Writes OUTDIR/burst-<label>-<N>.json and OUTDIR/summary.txt;
# the servers use port 18490. BURST_TIMEOUT: the per-request timeout in seconds (600).
set -euo pipefail
model="$1"; out="$2"; threads="${3:-2}"
shift $(( $# < 3 ? $# : 3 ))
root="$(cd "$(dirname "$0")/.." && pwd)"
bins=("$@"); [ ${#bins[@]} -eq 0 ] && bins=("$root/build/release/pagoda")
port=18490
mkdir -p "$out"
: > "$out/summary.txt"
for n in 8 32; do
  for i in "${!bins[@]}"; do
    bin="${bins[$i]}"
    "$bin" serve -m "$model" -t "$threads" --port "$port" --parallel 8 --ctx-size 4096 \
      --kv-cache-bytes 2GiB --no-log-requests 2>>"$out/serve.log" &
    pid=$!
    for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.1; done
    curl -sf "http://127.0.0.1:$port/v1/completions" -d '{"prompt":"warm up","max_tokens":2}' >/dev/null
    curl -sf -X POST "http://127.0.0.1:$port/v1/cache/reset" >/dev/null
    "$bin" bench --quiet --url "http://127.0.0.1:$port" -m "$model" --seed 3 --workload shared-prefix \
      --concurrency "$n" --requests "$n" --prefix-len 1700 --input-len 40 --output-len 16 --timeout "${BURST_TIMEOUT:-600}" \
      --label "bin$i-burst$n" --out "$out/burst-bin$i-$n.json" | tee -a "$out/summary.txt"
    kill -INT "$pid"; wait "$pid" || true
  done
done
