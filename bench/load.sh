#!/usr/bin/env bash
# The load runs in docs/performance.md: 64 streaming clients against `pagoda serve` on one model.
#   bench/load.sh MODEL OUTDIR [THREADS]      (PAGODA=path/to/pagoda overrides build/release/pagoda;
#                                              PARTS="steady hangup" picks the runs)
# steady: 64 clients in a closed loop, 2 requests each (128), ~64-token prompts, 32 generated
#         tokens each (ignore_eos): TTFT p50 / p99 and aggregate generation tokens/s.
# hangup: the same load with half the jobs closing their stream after 4 content chunks
#         (--hangup-fraction 0.5): the other half must all finish (0 failed, full output), and
#         afterwards no KV block may be live (/v1/cache/stats pool.blocks_live == 0).
# The server gets --parallel 64 (every client generating at once), one warm-up request, and
# the prefix cache reset before each run. Each run also logs the CPU seconds the server got
# (utime + stime from /proc) against 2 x its wall time: on a shared machine that share says how
# far the figures are from a quiet one. Writes OUTDIR/*.json, OUTDIR/summary.txt; port 18481.
set -euo pipefail
model="$1"; out="$2"; threads="${3:-2}"
root="$(cd "$(dirname "$0")/.." && pwd)"
pagoda="${PAGODA:-$root/build/release/pagoda}"
parts="${PARTS:-steady hangup}"
port=18481
url="http://127.0.0.1:$port"
mkdir -p "$out"
"$pagoda" serve -m "$model" -t "$threads" --port "$port" --parallel 64 --max-queue 64 --ctx-size 512 \
  --kv-cache-bytes 1GiB --no-log-requests 2>>"$out/serve.log" &
server_pid=$!
trap 'kill -INT "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 1200); do
  curl -sf "$url/health" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { echo "server exited, see $out/serve.log" >&2; exit 1; }
  sleep 0.1
done
# Warm-up: the first forward pages the weights in from the mmap'd file.
curl -sf "$url/v1/completions" -d '{"prompt":"warm up","max_tokens":2}' >/dev/null
bench() { "$pagoda" bench --quiet --url "$url" -m "$model" --workload random --concurrency 64 --requests 128 \
            --input-len 64 --output-len 32 --timeout 600 "$@"; }
{ echo "$(date -u '+%F %T') $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores, -t $threads";
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"; } | tee -a "$out/summary.txt"
server_cpu_s() { local st; read -r -a st <"/proc/$server_pid/stat"; echo $(((st[13] + st[14]) / $(getconf CLK_TCK))); }
for part in $parts; do
  curl -sf -X POST "$url/v1/cache/reset" >/dev/null
  cpu0=$(server_cpu_s); t0=$SECONDS
  case "$part" in
    steady) bench --seed 64 --label steady-c64 --out "$out/steady-c64.json" | tee -a "$out/summary.txt" ;;
    hangup) bench --seed 65 --label hangup-c64 --hangup-fraction 0.5 --hangup-after 4 \
              --out "$out/hangup-c64.json" | tee -a "$out/summary.txt" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
  echo "server CPU during $part: $(($(server_cpu_s) - cpu0)) s of $((SECONDS - t0)) s wall x $(nproc) cores" | tee -a "$out/summary.txt"
  # Cancellation is asynchronous: give the engine a moment to retire what the clients left.
  for _ in $(seq 1 50); do
    stats="$(curl -sf "$url/v1/cache/stats")"
    python3 -c 'import json,sys; s=json.load(sys.stdin); sys.exit(0 if s["engine"]["running"]==0 and s["pool"]["blocks_live"]==0 else 1)' <<<"$stats" && break
    sleep 0.1
  done
  python3 -c 'import json,sys; s=json.load(sys.stdin); p=s["pool"]; print("after %s: engine running %d, pool blocks_live %d, blocks_cached %d, blocks_free %d" % (sys.argv[1], s["engine"]["running"], p["blocks_live"], p["blocks_cached"], p["blocks_free"]))' "$part" <<<"$stats" | tee -a "$out/summary.txt"
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/summary.txt"
done
