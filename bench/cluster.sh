#!/usr/bin/env bash
# The replica numbers in docs/performance.md: multi-turn chat without any cache key through HAProxy
# (scripts/cluster.sh) to 1 replica, 3 replicas with cache affinity and 3 with round-robin,
# measured with `pagoda bench` (time to first token per turn, cached prompt tokens).
#   bench/cluster.sh MODEL OUTDIR [CONVERSATIONS=6] [TURNS=6] [INPUT_LEN=256]
# (CONVERSATIONS run at once, each TURNS turns of INPUT_LEN-token user messages and 32-token
# answers, ignore_eos.)
# Each replica runs one thread (-t 1) with --parallel 4 and a 512 MiB KV budget. Before a run
# every replica gets one warm-up request (it pages the weights in) and its prefix cache is
# reset. Writes OUTDIR/<setup>.json (pagoda bench --out), OUTDIR/cluster.log and
# OUTDIR/summary.txt; HAProxy listens on port 18490.
set -euo pipefail
model="$1"; out="$2"; conversations="${3:-6}"; turns="${4:-6}"; input_len="${5:-256}"
root="$(cd "$(dirname "$0")/.." && pwd)"
pagoda="$root/build/release/pagoda"
port=18490
mkdir -p "$out"
: > "$out/cluster.log"
: > "$out/summary.txt"

http_post() {  # http_post PORT PATH BODY: a tiny HTTP/1.0 client (no curl needed)
  exec 3<>"/dev/tcp/127.0.0.1/$1"
  printf 'POST %s HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %s\r\n\r\n%s' "$2" "${#3}" "$3" >&3
  cat <&3 >/dev/null
  exec 3<&-
}

run() {  # run LABEL REPLICAS BALANCE
  local label="$1" log="$out/$1.cluster.log"
  PAGODA_BIN="$pagoda" "$root/scripts/cluster.sh" --replicas "$2" --port "$port" --balance "$3" -m "$model" \
    -- -t 1 --parallel 4 --kv-cache-bytes 512MiB --no-log-requests > "$log" 2>&1 &
  local cluster_pid=$!
  until grep -q "cluster.sh: ready" "$log"; do
    kill -0 "$cluster_pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  for p in $(sed -n 's|^cluster.sh: replica r[0-9]* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$log"); do
    http_post "$p" /v1/completions '{"prompt":"warm up","max_tokens":2}'
    http_post "$p" /v1/cache/reset ''
  done
  "$pagoda" bench --quiet --url "http://127.0.0.1:$port" -m "$model" --seed 7 --workload multi-turn \
    --conversations "$conversations" --turns "$turns" --input-len "$input_len" --output-len 32 \
    --label "$label" --out "$out/$label.json" | tee -a "$out/summary.txt"
  kill -TERM "$cluster_pid"
  wait "$cluster_pid" || true
  cat "$log" >> "$out/cluster.log"
  rm -f "$log"
}

run 1-replica 1 affinity
run 3-affinity 3 affinity
run 3-roundrobin 3 roundrobin

# Turns 2.. only (turn 1 is cold everywhere): a hit reuses the previous turn's whole prompt
# (cached tokens >= its prompt tokens - 1: the last token of the previous prompt may merge with
# the answer's first characters when the history is re-tokenized); also the share with cached
# tokens above half the prompt (the e2e test's criterion), cached / prompt tokens, and TTFT.
/usr/bin/python3 - "$out" <<'EOF' | tee -a "$out/summary.txt"
import json, statistics, sys
out = sys.argv[1]
print("\n| setup | hits, turns 2.. | cached > half the prompt | cached / prompt tokens | TTFT p50 | TTFT mean | TTFT p90 | turn 1 TTFT p50 | failed |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for label in ["1-replica", "3-affinity", "3-roundrobin"]:
    r = json.load(open(f"{out}/{label}.json"))
    ok = {(q["job"], q["turn"]): q for q in r["requests"] if q["result"] == "ok" and q["prompt_tokens"] > 0}
    later = [(q, ok.get((j, t - 1))) for (j, t), q in ok.items() if t > 0]
    hits = sum(1 for q, prev in later if prev and q["cached_tokens"] >= prev["prompt_tokens"] - 1)
    half = sum(1 for q, _ in later if 2 * q["cached_tokens"] > q["prompt_tokens"])
    cached = sum(q["cached_tokens"] for q, _ in later)
    prompt = sum(q["prompt_tokens"] for q, _ in later)
    ttft = sorted(q["ttft_ms"] for q, _ in later)
    p90 = ttft[min(len(ttft) - 1, int(0.9 * (len(ttft) - 1) + 0.5))]
    first = [q["ttft_ms"] for (j, t), q in ok.items() if t == 0]
    print(f"| {label} | {hits} / {len(later)} | {half} / {len(later)} | {100.0 * cached / prompt:.0f}%"
          f" | {statistics.median(ttft):.0f} ms | {statistics.mean(ttft):.0f} ms | {p90:.0f} ms"
          f" | {statistics.median(first):.0f} ms | {r['summary']['requests_failed']} |")
EOF
