#!/usr/bin/env bash
# Runs N `pagoda serve` replicas on loopback ports with HAProxy in front, in the foreground;
# SIGINT / SIGTERM stop them all (HAProxy first, then the replicas, which finish what they run).
#
#   scripts/cluster.sh --replicas N --port P -m MODEL [--host 127.0.0.1] [--balance affinity|roundrobin]
#                      [--drain-seconds 3] [--stats-port S] [-- SERVE ARGS...]
#
# --balance affinity (default) routes by conversation (deploy/haproxy/pagoda-affinity.cfg: the
# prompt_cache_key, X-Session-Id, user, or the start of the conversation, hashed on a
# consistent ring); roundrobin is the comparison (pagoda-roundrobin.cfg). The replicas listen
# on free loopback ports as r1..rN (--replica-id) with --drain-seconds (a replica sent SIGTERM
# fails its health check and is taken out before it stops) and --busy-status 503 (HAProxy 2.6
# retries 503 on another replica, not 429). Unless SERVE ARGS (or PAGODA_THREADS /
# PAGODA_KV_CACHE_BYTES) say otherwise, each replica gets nproc / N threads and half of
# MemAvailable / N as its KV budget, so N replicas do not each size themselves for the whole
# machine. --stats-port adds HAProxy's stats page (/stats) and Prometheus metrics (/metrics) on
# 127.0.0.1:S. Prints `cluster.sh: ready: ...` (and each replica's port and pid) once serving.
# PAGODA_BIN names the pagoda executable (default build/release/pagoda), HAPROXY_BIN haproxy.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

usage() {
  sed -n '5,6p' "$0" | sed 's/^# //' >&2
  exit 2
}
die() {
  echo "cluster.sh: $*" >&2
  exit 1
}
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

replicas="" port="" model="" host=127.0.0.1 balance=affinity drain=3 stats_port=""
serve_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas) replicas="${2:-}"; shift 2 || usage ;;
    --port) port="${2:-}"; shift 2 || usage ;;
    -m|--model) model="${2:-}"; shift 2 || usage ;;
    --host) host="${2:-}"; shift 2 || usage ;;
    --balance) balance="${2:-}"; shift 2 || usage ;;
    --drain-seconds) drain="${2:-}"; shift 2 || usage ;;
    --stats-port) stats_port="${2:-}"; shift 2 || usage ;;
    --) shift; serve_args=("$@"); break ;;
    -h|--help) usage ;;
    *) echo "cluster.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[ -n "$replicas" ] && [ -n "$port" ] && [ -n "$model" ] || usage
is_uint "$replicas" && [ "$replicas" -ge 1 ] && [ "$replicas" -le 64 ] || die "--replicas must be 1..64"
is_uint "$port" && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] || die "--port must be 1..65535"
[ -z "$stats_port" ] || { is_uint "$stats_port" && [ "$stats_port" -ge 1 ] && [ "$stats_port" -le 65535 ]; } ||
  die "--stats-port must be 1..65535"
case "$balance" in affinity|roundrobin) ;; *) die "--balance must be affinity or roundrobin" ;; esac
config="$root/deploy/haproxy/pagoda-$balance.cfg"
[ -f "$config" ] || die "no HAProxy configuration at $config"

pagoda="${PAGODA_BIN:-$root/build/release/pagoda}"
[ -x "$pagoda" ] || die "no pagoda executable at $pagoda (build it, or set PAGODA_BIN)"
haproxy="${HAPROXY_BIN:-$(command -v haproxy || echo /usr/sbin/haproxy)}"
[ -x "$haproxy" ] || die "no haproxy at $haproxy (apt-get install haproxy, or set HAPROXY_BIN)"

# Per-replica defaults, unless the serve arguments or the environment set them.
has_arg() {
  local a
  for a in "${serve_args[@]}"; do
    for name in "$@"; do
      case "$a" in "$name"|"$name="*) return 0 ;; esac
    done
  done
  return 1
}
defaults=()
if ! has_arg -t --threads && [ -z "${PAGODA_THREADS:-}" ]; then
  threads=$(( $(nproc) / replicas ))
  defaults+=(--threads "$(( threads > 0 ? threads : 1 ))")
fi
if ! has_arg --kv-cache-bytes && [ -z "${PAGODA_KV_CACHE_BYTES:-}" ]; then
  avail_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null || true)
  [ -n "$avail_kib" ] && defaults+=(--kv-cache-bytes "$(( avail_kib * 1024 / 2 / replicas ))")
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/pagoda-cluster.XXXXXX")"
pids=()
haproxy_pid=""
stopping=0

stop() {
  local status="$1" pid
  [ "$stopping" = 1 ] && return
  stopping=1
  trap '' INT TERM
  if [ -n "$haproxy_pid" ]; then
    kill -TERM "$haproxy_pid" 2>/dev/null || true
    wait "$haproxy_pid" 2>/dev/null || true
  fi
  # SIGINT: no drain (HAProxy is gone); running requests get --shutdown-timeout to finish.
  for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
  echo "cluster.sh: stopped" >&2
  exit "$status"
}
trap 'stop 0' INT TERM

for i in $(seq 1 "$replicas"); do
  # The replica's stderr goes to the terminal and to a file the port is read from.
  "$pagoda" serve -m "$model" --host 127.0.0.1 --port 0 --replica-id "r$i" --drain-seconds "$drain" \
    --busy-status 503 "${defaults[@]}" "${serve_args[@]}" 2> >(tee "$work/r$i.log" >&2) &
  pids+=($!)
done

# Waits for `pattern` in replica i's log; fails when the replica exits first.
wait_log() {
  local i="$1" pattern="$2" pid="${pids[$(( $1 - 1 ))]}"
  until grep -q "$pattern" "$work/r$i.log" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { echo "cluster.sh: replica r$i exited during start-up" >&2; stop 1; }
    sleep 0.05
  done
}
ports=()
for i in $(seq 1 "$replicas"); do
  wait_log "$i" "listening on http://"
  ports+=("$(sed -n 's|.*listening on http://[^ ]*:\([0-9][0-9]*\) .*|\1|p' "$work/r$i.log" | head -n 1)")
done
for i in $(seq 1 "$replicas"); do wait_log "$i" "pagoda serve: ready"; done

{
  cat "$config"
  for i in $(seq 1 "$replicas"); do
    echo "    server r$i 127.0.0.1:${ports[$(( i - 1 ))]}"
  done
  if [ -n "$stats_port" ]; then
    printf '\nfrontend stats\n    bind 127.0.0.1:%s\n    stats enable\n    stats uri /stats\n    stats refresh 2s\n' "$stats_port"
    printf '    http-request use-service prometheus-exporter if { path /metrics }\n'
  fi
} > "$work/haproxy.cfg"
PAGODA_LB_BIND="$host:$port" "$haproxy" -db -f "$work/haproxy.cfg" &
haproxy_pid=$!

# Ready once HAProxy accepts connections.
probe_host="$host"
case "$probe_host" in 0.0.0.0|"*"|"") probe_host=127.0.0.1 ;; esac
until (exec 3<>"/dev/tcp/$probe_host/$port") 2>/dev/null; do
  kill -0 "$haproxy_pid" 2>/dev/null || { echo "cluster.sh: haproxy exited during start-up" >&2; stop 1; }
  sleep 0.05
done
for i in $(seq 1 "$replicas"); do
  echo "cluster.sh: replica r$i on http://127.0.0.1:${ports[$(( i - 1 ))]} pid ${pids[$(( i - 1 ))]}" >&2
done
echo "cluster.sh: ready: http://$host:$port ($replicas replicas, $balance, haproxy pid $haproxy_pid)" >&2

# Runs until HAProxy exits (then stops the replicas and fails) or a signal stops everything.
set +e
wait "$haproxy_pid"
status=$?
[ "$stopping" = 1 ] && exit 0
haproxy_pid=""
echo "cluster.sh: haproxy exited with status $status" >&2
stop 1
