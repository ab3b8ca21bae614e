# Sourced by the bench scripts that start servers: wait_ready waits (up to 90 s) for
# http://127.0.0.1:$port/health to answer, where $port is the caller's.
wait_ready() {
  for _ in $(seq 1 900); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "server did not become ready" >&2; exit 1
}

# start_server NAME CMD...: runs CMD in the background, its output in $out/serve-NAME.log,
# sets server_pid and waits until it answers.
start_server() {
  local name="$1"; shift
  "$@" >"$out/serve-$name.log" 2>&1 &
  server_pid=$!
  wait_ready
}
